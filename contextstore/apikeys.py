"""API keys for ``contextstore serve``: the key file, key generation and verification.

A key looks like ``csk_<id>_<secret>``: ``id`` is 12 hex digits, public (``keys list`` shows
it, access logs carry it); ``secret`` is 32 random bytes, URL-safe base64. The file named by
``CONTEXTSTORE_API_KEYS`` holds, per key, its id, namespace, role, a random salt and
``HMAC-SHA256(salt, secret)`` — never the key itself, so a leaked file grants nothing.

Why HMAC-SHA256 and not a slow password hash (scrypt, argon2): slow hashes exist to make
guessing *low-entropy* passwords expensive. A 256-bit random secret cannot be guessed at any
hashing speed, and a slow hash would cost every request milliseconds of CPU. The salt keeps
two files (or two keys with equal secrets) from sharing hashes. The id in the key selects the
one entry to check, so a request costs one HMAC, whatever the number of keys; the hashes are
compared with ``hmac.compare_digest`` (constant time).

``KeyRing`` re-reads the file whenever its inode, size, or modification or change time changes, so a
``keys revoke`` takes effect on the next request without a restart. Writers replace the file
atomically (temporary file + rename) under an exclusive lock on a sidecar ``.lock`` file, so
concurrent ``keys add`` never lose an entry and a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from contextstore.config import ContextEngineConfig
from contextstore.errors import ConfigurationError, NotFoundError, ValidationError

ENV_API_KEYS: Final = "CONTEXTSTORE_API_KEYS"
ROLES: Final = ("agent", "admin")
Role = Literal["agent", "admin"]

PREFIX: Final = "csk_"
FILE_VERSION: Final = 1
_ID_HEX_DIGITS: Final = 12
_SECRET_BYTES: Final = 32
_SALT_BYTES: Final = 16
_KEY = re.compile(r"csk_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})", re.ASCII)
_ID = re.compile(r"[0-9a-f]{12}", re.ASCII)


@dataclass(frozen=True)
class KeyEntry:
    """One stored key: what it may reach (``namespace``, ``role``) and how to check it."""

    id: str
    namespace: str
    role: Role
    salt: str
    hash: str
    created_at: str
    label: str = ""

    def matches(self, secret: str) -> bool:
        """Whether ``secret`` is this key's secret, compared in constant time."""
        expected = bytes.fromhex(self.hash)
        return hmac.compare_digest(_digest(bytes.fromhex(self.salt), secret), expected)


@dataclass(frozen=True)
class Principal:
    """Who a verified key speaks for: the key's id, its namespace and its role."""

    key_id: str
    namespace: str
    role: Role


def _digest(salt: bytes, secret: str) -> bytes:
    return hmac.new(salt, secret.encode("utf-8"), hashlib.sha256).digest()


def split_key(key: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed key, else ``None`` (never raises)."""
    found = _KEY.fullmatch(key)
    return None if found is None else (found.group(1), found.group(2))


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise ValidationError("role", f"{role!r} is not one of {', '.join(ROLES)}")
    return role  # type: ignore[return-value]


def check_namespace(namespace: str) -> str:
    # The same rule the store applies, so a key never names a namespace no store can open.
    try:
        ContextEngineConfig(namespace=namespace)
    except ConfigurationError as exc:
        raise ValidationError("namespace", str(exc).removeprefix("namespace: ")) from exc
    return namespace


def new_key(namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
    """A fresh key and the entry that verifies it. The key is returned once, here only."""
    role = check_role(role)
    namespace = check_namespace(namespace)
    key_id = secrets.token_hex(_ID_HEX_DIGITS // 2)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    salt = secrets.token_bytes(_SALT_BYTES)
    entry = KeyEntry(
        id=key_id,
        namespace=namespace,
        role=role,
        salt=salt.hex(),
        hash=_digest(salt, secret).hex(),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        label=label,
    )
    return f"{PREFIX}{key_id}_{secret}", entry


def keys_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$CONTEXTSTORE_API_KEYS``; ``ConfigurationError`` when neither is set."""
    chosen = os.fspath(path) if path is not None else os.environ.get(ENV_API_KEYS)
    if not chosen:
        raise ConfigurationError(f"no key file: set {ENV_API_KEYS} or pass --file")
    return Path(chosen)


def read_entries(path: Path) -> list[KeyEntry]:
    """The entries of a key file; a missing file has none. Malformed → ``ConfigurationError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the key file {path}: {exc}") from exc
    try:
        data = json.loads(text)
        if data.get("version") != FILE_VERSION:
            raise ValueError(f"unsupported version {data.get('version')!r}")
        entries = [_entry(item) for item in data["keys"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"the key file {path} is malformed: {exc}") from exc
    return entries


def _entry(item: Any) -> KeyEntry:
    entry = KeyEntry(**{name: item[name] for name in item if name in KeyEntry.__dataclass_fields__})
    if not _ID.fullmatch(entry.id) or entry.role not in ROLES:
        raise ValueError(f"entry {entry.id!r} has a bad id or role")
    bytes.fromhex(entry.salt)
    bytes.fromhex(entry.hash)
    return entry


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write(path: Path, entries: list[KeyEntry]) -> None:
    document = {"version": FILE_VERSION, "keys": [asdict(entry) for entry in entries]}
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        # mkstemp creates the file 0600: only its owner may read the hashes.
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def add_key(path: Path, namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
    """Create a key, store its entry in ``path`` (created if missing) and return both."""
    key, entry = new_key(namespace, role, label=label)
    with _locked(path):
        _write(path, [*read_entries(path), entry])
    return key, entry


def revoke_key(path: Path, id_or_key: str) -> KeyEntry:
    """Remove the entry named by its id or by the key itself; ``NotFoundError`` if none."""
    parts = split_key(id_or_key)
    key_id = parts[0] if parts is not None else id_or_key
    if not _ID.fullmatch(key_id):
        # Not echoed: a mistyped key is still mostly a secret.
        raise ValidationError("id_or_key", "is neither a key id (12 hex digits) nor a key")
    with _locked(path):
        entries = read_entries(path)
        kept = [entry for entry in entries if entry.id != key_id]
        if len(kept) == len(entries):
            raise NotFoundError(f"no key with id {key_id} in {path}")
        _write(path, kept)
    return next(entry for entry in entries if entry.id == key_id)


class KeyRing:
    """Verifies presented keys against the key file, re-reading it whenever it changes.

    ``verify(key)`` returns the ``Principal`` of a valid key, else ``None`` — for a malformed
    key, an unknown id and a wrong secret alike. A file that cannot be read (or is malformed)
    raises ``ConfigurationError``: the service refuses every key rather than guess.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._entries: dict[str, KeyEntry] = {}
        self.reload_if_changed()

    def reload_if_changed(self) -> None:
        try:
            status = self.path.stat()
            stamp: tuple[int, ...] = (
                status.st_ino,
                status.st_size,
                status.st_mtime_ns,
                status.st_ctime_ns,
            )
        except FileNotFoundError:
            stamp = ()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the key file {self.path}: {exc}") from exc
        if stamp == self._stamp:
            return
        with self._lock:
            entries = read_entries(self.path)
            self._entries = {entry.id: entry for entry in entries}
            self._stamp = stamp

    def __len__(self) -> int:
        return len(self._entries)

    def verify(self, key: str) -> Principal | None:
        self.reload_if_changed()
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        entry = self._entries.get(key_id)
        if entry is None or not entry.matches(secret):
            return None
        return Principal(key_id=entry.id, namespace=entry.namespace, role=entry.role)

    def lookup(self, key_id: str) -> Principal | None:
        """The ``Principal`` of the key with this id while it is in the file, else ``None``.

        For callers that verified the key earlier (a console session signed with it): a
        revoked key is gone from the next call on.
        """
        self.reload_if_changed()
        entry = self._entries.get(key_id)
        if entry is None:
            return None
        return Principal(key_id=entry.id, namespace=entry.namespace, role=entry.role)
