"""API keys for ``contextstore serve``: where they are kept, key generation and verification.

Keys are kept in a ``KeyStore``: a key file (``FileKeyStore``, one node) or, when no key file
is configured, the shared SQL database (``contextstore.interfaces.sql_keys.SqlKeyStore``, any
number of nodes). Both hold the same entries and the console's signing secret; ``KeyRing``
verifies presented keys against either.

A key looks like ``csk_<id>_<secret>``: ``id`` is 12 hex digits, public (``keys list`` shows
it, access logs carry it); ``secret`` is 32 random bytes, URL-safe base64. The file named by
``CONTEXTSTORE_API_KEYS`` holds, per key, its id, namespace, role, a random salt and
``HMAC-SHA256(salt, secret)`` — never the key itself, so a leaked file grants nothing. It
belongs outside any working tree (``suggested_keys_path``: the user's configuration
directory) and is written readable by its owner only (mode 0600).

Why HMAC-SHA256 and not a slow password hash (scrypt, argon2): slow hashes exist to make
guessing *low-entropy* passwords expensive. A 256-bit random secret cannot be guessed at any
hashing speed, and a slow hash would cost every request milliseconds of CPU. The salt keeps
two files (or two keys with equal secrets) from sharing hashes. The id in the key selects the
one entry to check, so a request costs one HMAC, whatever the number of keys; the hashes are
compared with ``hmac.compare_digest`` (constant time).

``FileKeyStore`` re-reads the file whenever its inode, size, or modification or change time
changes, and on every check while it is less than two seconds old (a change within a coarse
file system's timestamp granularity leaves the stamp as it was), so a ``keys revoke`` or a
role changed by hand takes effect on the next request without a restart. Writers replace
the file atomically (temporary file + rename) under an exclusive lock on a sidecar ``.lock``
file, so concurrent ``keys add`` never lose an entry and a reader never sees half a file.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from contextstore.config import ContextEngineConfig
from contextstore.errors import ConfigurationError, NotFoundError, ValidationError

ENV_API_KEYS: Final = "CONTEXTSTORE_API_KEYS"
ROLES: Final = ("agent", "admin", "owner")
"""Each role may do what the ones before it may. ``agent``: run, match and search in its
namespace and read that namespace's metrics. ``admin``: its namespace's documents and
metrics (prune included), and read the lessons. ``owner``: the database's: write lessons,
reach every namespace's metrics, read ``/metrics`` unfiltered."""
Role = Literal["agent", "admin", "owner"]

PREFIX: Final = "csk_"
FILE_VERSION: Final = 1
_ID_HEX_DIGITS: Final = 12
_SECRET_BYTES: Final = 32
_SALT_BYTES: Final = 16
_KEY = re.compile(r"csk_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})", re.ASCII)
_ID = re.compile(r"[0-9a-f]{12}", re.ASCII)
RACY_SECONDS: Final = 2.0
"""A key file modified less than this long ago is read again on every check."""


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

    def may(self, needed: Role) -> bool:
        """Whether this key's role grants what ``needed`` may do."""
        return grants(self.role, needed)


def _digest(salt: bytes, secret: str) -> bytes:
    return hmac.new(salt, secret.encode("utf-8"), hashlib.sha256).digest()


def split_key(key: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed key, else ``None`` (never raises)."""
    found = _KEY.fullmatch(key)
    return None if found is None else (found.group(1), found.group(2))


def grants(role: str, needed: Role) -> bool:
    """Whether a key of ``role`` may do what ``needed`` may (``ROLES`` is in rank order)."""
    return role in ROLES and ROLES.index(role) >= ROLES.index(needed)


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


def suggested_keys_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where a key file belongs: the user's configuration directory, outside any working
    tree (``$XDG_CONFIG_HOME/contextstore/keys.json``, else ``~/.config/…``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "contextstore" / "keys.json"


def keys_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$CONTEXTSTORE_API_KEYS`` (or ``service.api_keys`` of
    ``contextstore.toml``); ``ConfigurationError`` when neither is set."""
    if path is not None:
        chosen: str | None = os.fspath(path)
    else:
        from contextstore.config.sources import load_settings

        chosen = load_settings(os.environ)["service.api_keys"]
    if not chosen:
        raise ConfigurationError(
            f"no key file: set {ENV_API_KEYS} or pass --file "
            f"(e.g. {suggested_keys_path()}, outside any working tree)"
        )
    return Path(chosen)


def require_key_file(path: Path) -> list[KeyEntry]:
    """The entries of the key file ``path``, which must exist: ``ConfigurationError`` naming
    it when it is missing, unreadable or malformed (a server never starts on a file it
    cannot read, since it would refuse every key)."""
    if not path.exists():
        raise ConfigurationError(
            f"the key file {path} does not exist; create it with "
            f"'contextstore keys add --file {path}'"
        )
    return read_entries(path)


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
    # A directory made here is its owner's alone, as the file is (mode 0600).
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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


def create_key_file(path: Path) -> None:
    """An empty key file at ``path`` (mode 0600), unless one is there: a server started on
    it refuses every key until ``add_key`` adds one."""
    with _locked(path):
        if not path.exists():
            _write(path, [])


def add_key(path: Path, namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
    """Create a key, store its entry in ``path`` (created if missing) and return both."""
    key, entry = new_key(namespace, role, label=label)
    with _locked(path):
        _write(path, [*read_entries(path), entry])
    return key, entry


def key_id_of(id_or_key: str) -> str:
    """The key id named by an id or by the key itself; ``ValidationError`` otherwise."""
    parts = split_key(id_or_key)
    key_id = parts[0] if parts is not None else id_or_key
    if not _ID.fullmatch(key_id):
        # Not echoed: a mistyped key is still mostly a secret.
        raise ValidationError("id_or_key", "is neither a key id (12 hex digits) nor a key")
    return key_id


def revoke_key(path: Path, id_or_key: str) -> KeyEntry:
    """Remove the entry named by its id or by the key itself; ``NotFoundError`` if none."""
    key_id = key_id_of(id_or_key)
    with _locked(path):
        entries = read_entries(path)
        kept = [entry for entry in entries if entry.id != key_id]
        if len(kept) == len(entries):
            raise NotFoundError(f"no key with id {key_id} in {path}")
        _write(path, kept)
    return next(entry for entry in entries if entry.id == key_id)


class KeyStore(Protocol):
    """Where a service's keys and its console signing secret live: a key file or SQL.

    ``where`` names it in messages (the file, or the database URL with secrets masked).
    ``blocking`` says ``find`` may wait on the network, so an event loop calls it in a thread.
    """

    where: str
    blocking: bool

    def find(self, key_id: str) -> KeyEntry | None:
        """The entry with this id as it is now, else ``None``."""
        ...

    def entries(self) -> list[KeyEntry]: ...

    def add(self, namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
        """Create a key, store its entry, return both (the key is shown only now)."""
        ...

    def revoke(self, id_or_key: str) -> KeyEntry:
        """Remove the entry named by its id or its key; ``NotFoundError`` if there is none."""
        ...

    def console_secret(self) -> bytes:
        """The secret that signs console sessions, made once and shared by every reader."""
        ...

    def close(self) -> None: ...


class FileKeyStore:
    """The key file: one node's keys, re-read whenever the file changes.

    A file that cannot be read (or is malformed) raises ``ConfigurationError``: the service
    refuses every key rather than guess. With ``required``, a missing file is refused at
    construction too (``require_key_file``). The console secret is kept beside the file in
    ``<key file>.console-secret`` (mode 0600).
    """

    blocking = False

    def __init__(
        self, path: Path, *, required: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.where = str(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._entries: dict[str, KeyEntry] = {}
        if required:
            require_key_file(path)
        self.reload_if_changed()

    def reload_if_changed(self) -> None:
        stamp = self.stamp()
        if stamp == self._stamp and not self._racy(stamp):
            return
        with self._lock:
            entries = read_entries(self.path)
            self._entries = {entry.id: entry for entry in entries}
            self._stamp = stamp

    def stamp(self) -> tuple[int, ...]:
        """What tells one version of the file from another: inode, size, modification and
        change times (``()`` while the file is missing)."""
        try:
            status = self.path.stat()
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the key file {self.path}: {exc}") from exc
        return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)

    def _racy(self, stamp: tuple[int, ...]) -> bool:
        # A file changed within its file system's timestamp granularity of the last read
        # (a second on some) may have changed again with the same stamp: read it again
        # until its stamp is safely in the past, as git does with its index.
        return bool(stamp) and self._clock() - stamp[2] / 1e9 < RACY_SECONDS

    def find(self, key_id: str) -> KeyEntry | None:
        self.reload_if_changed()
        return self._entries.get(key_id)

    def entries(self) -> list[KeyEntry]:
        return read_entries(self.path)

    def add(self, namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
        return add_key(self.path, namespace, role, label=label)

    def revoke(self, id_or_key: str) -> KeyEntry:
        return revoke_key(self.path, id_or_key)

    def console_secret(self) -> bytes:
        return file_secret(self.path.with_name(self.path.name + ".console-secret"))

    def close(self) -> None:
        pass


SECRET_HEX_CHARS: Final = 64
"""A console secret made here: 32 random bytes in hex."""


def file_secret(path: Path) -> bytes:
    """The secret kept in ``path``, created (mode 0600) by whichever process comes first."""
    try:
        # O_EXCL: of several workers starting at once, one creates it and the others read it.
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_secret(path)
    except OSError as exc:
        raise ConfigurationError(f"cannot create the console secret {path}: {exc}") from exc
    secret = secrets.token_hex(SECRET_HEX_CHARS // 2)
    with os.fdopen(handle, "w", encoding="ascii") as out:
        out.write(secret)
        out.flush()
        os.fsync(out.fileno())
    return secret.encode("ascii")


def _read_secret(path: Path) -> bytes:
    # A worker may read while another is still writing the file it just created.
    for _ in range(100):
        try:
            text = path.read_text(encoding="ascii").strip()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the console secret {path}: {exc}") from exc
        if len(text) >= SECRET_HEX_CHARS // 2:
            return text.encode("ascii")
        time.sleep(0.01)
    raise ConfigurationError(f"the console secret {path} is too short; delete it to make a new one")


class KeyRing:
    """Verifies presented keys against a ``KeyStore`` (a ``Path`` means its key file).

    ``verify(key)`` returns the ``Principal`` of a valid key, else ``None`` — for a malformed
    key, an unknown id and a wrong secret alike. Every check asks the store, so a key added
    or revoked anywhere counts from the next request on. ``averify``/``alookup`` are the same
    for an event loop: a store that waits on the network is asked from a worker thread.
    """

    def __init__(
        self,
        store: KeyStore | Path,
        *,
        required: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store: KeyStore = (
            FileKeyStore(store, required=required, clock=clock)
            if isinstance(store, Path)
            else store
        )

    def __len__(self) -> int:
        return len(self.store.entries())

    def verify(self, key: str) -> Principal | None:
        parts = split_key(key)
        if parts is None:
            return None
        return _checked(self.store.find(parts[0]), parts[1])

    def lookup(self, key_id: str) -> Principal | None:
        """The ``Principal`` of the key with this id while it is stored, else ``None``.

        For callers that verified the key earlier (a console session signed with it): a
        revoked key is gone from the next call on.
        """
        return _principal(self.store.find(key_id))

    async def averify(self, key: str) -> Principal | None:
        parts = split_key(key)
        if parts is None:
            return None
        return _checked(await self._afind(parts[0]), parts[1])

    async def alookup(self, key_id: str) -> Principal | None:
        return _principal(await self._afind(key_id))

    async def _afind(self, key_id: str) -> KeyEntry | None:
        if not self.store.blocking:
            return self.store.find(key_id)
        return await asyncio.to_thread(self.store.find, key_id)


def _checked(entry: KeyEntry | None, secret: str) -> Principal | None:
    return _principal(entry) if entry is not None and entry.matches(secret) else None


def _principal(entry: KeyEntry | None) -> Principal | None:
    if entry is None:
        return None
    return Principal(key_id=entry.id, namespace=entry.namespace, role=entry.role)
