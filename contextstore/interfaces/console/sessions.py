"""Console sessions and CSRF tokens: signed values, no server-side session table.

A session cookie is ``<key id>.<issued>.<nonce>.<mac>``: the admin key's public id, the
instant it signed in (Unix seconds), 16 random bytes, and ``HMAC-SHA256(secret, …)`` over
the three. Nothing in it is secret and nothing in it can be changed without the secret. It
is accepted while it is younger than ``SESSION_SECONDS`` *and* its key is still an admin or
owner key in the key store, so revoking the key ends every console session signed in with it.

Why signed cookies rather than sessions stored on the server: ``contextstore serve`` runs
several worker processes and may run on several hosts; a signed value needs only the one
shared secret, not a row per session written on every sign-in. The price is that signing
out clears the cookie in that browser but cannot recall a copy of it taken earlier; the
short lifetime bounds that, and revoking the key ends it at once.

CSRF: every form carries ``HMAC(secret, "csrf" | nonce)`` of the session's nonce, checked in
constant time; a form posted without it, with another session's token or with a token made
up by a page elsewhere is refused. The sign-in form, which has no session yet, is tied the
same way to a random nonce in a short-lived pre-session cookie.

The secret is ``CONTEXTSTORE_CONSOLE_SECRET`` when set (≥ 32 characters; every host serving
one console must share it), else the key store's: 32 random bytes kept in
``<key file>.console-secret`` (created once, mode 0600), which every worker of one host
reads, or, without a key file, in the shared database, which every host reads.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from contextstore.errors import ConfigurationError
from contextstore.interfaces.apikeys import FileKeyStore, KeyStore

ENV_CONSOLE_SECRET: Final = "CONTEXTSTORE_CONSOLE_SECRET"
MIN_SECRET_CHARS: Final = 32
SESSION_SECONDS: Final = 8 * 3600
"""How long a console session lasts after sign-in, in seconds (a working day)."""
SIGNIN_SECONDS: Final = 3600
"""How long a sign-in form stays valid, in seconds."""

_NONCE_BYTES: Final = 16
_SESSION = re.compile(r"([0-9a-f]{12})\.([0-9]{1,12})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})")
_NONCE = re.compile(r"[A-Za-z0-9_-]{22}")


@dataclass(frozen=True)
class Session:
    """A verified session: which key signed in, when, and the nonce its CSRF token binds."""

    key_id: str
    issued: int
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def new_nonce() -> str:
    return _b64(secrets.token_bytes(_NONCE_BYTES))


class Signer:
    """Makes and checks session values and CSRF tokens with one secret."""

    def __init__(self, secret: bytes | Callable[[], bytes]) -> None:
        # A callable is read on first use: a shared database still starting up fails that
        # request (503), not the server's start.
        self._source = secret
        self._secret: bytes | None = None
        self._lock = threading.Lock()
        if isinstance(secret, bytes):
            self._load()

    def _load(self) -> bytes:
        with self._lock:
            if self._secret is None:
                source = self._source
                secret = source if isinstance(source, bytes) else source()
                if len(secret) < MIN_SECRET_CHARS:
                    raise ConfigurationError(
                        f"the console secret must be at least {MIN_SECRET_CHARS} bytes"
                    )
                self._secret = secret
            return self._secret

    def _mac(self, *parts: str) -> str:
        message = "|".join(parts).encode("utf-8")
        secret = self._secret if self._secret is not None else self._load()
        return _b64(hmac.new(secret, message, hashlib.sha256).digest())

    def session_value(self, key_id: str, issued: int, nonce: str | None = None) -> str:
        nonce = nonce or new_nonce()
        return f"{key_id}.{issued}.{nonce}.{self._mac('session', key_id, str(issued), nonce)}"

    def read_session(self, value: str | None, now: float) -> Session | None:
        """The session in a cookie value; ``None`` when missing, malformed, forged or expired."""
        found = _SESSION.fullmatch(value or "")
        if found is None:
            return None
        key_id, issued_text, nonce, mac = found.groups()
        if not hmac.compare_digest(mac, self._mac("session", key_id, issued_text, nonce)):
            return None
        issued = int(issued_text)
        if not issued <= now < issued + SESSION_SECONDS:
            return None
        return Session(key_id=key_id, issued=issued, nonce=nonce)

    def csrf_token(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def csrf_valid(self, nonce: str | None, token: str | None) -> bool:
        """Whether ``token`` is the CSRF token of ``nonce`` (constant time; ``None`` → no)."""
        if not nonce or not token or _NONCE.fullmatch(nonce) is None:
            return False
        return hmac.compare_digest(token.encode("utf-8"), self.csrf_token(nonce).encode("ascii"))

    def signin_value(self, nonce: str, issued: int) -> str:
        """The pre-session cookie of a sign-in form: its nonce, when it was served, a MAC."""
        return f"{nonce}.{issued}.{self._mac('signin', nonce, str(issued))}"

    def read_signin(self, value: str | None, now: float) -> str | None:
        """The nonce of a valid, unexpired pre-session cookie, else ``None``."""
        nonce, _, rest = (value or "").partition(".")
        issued_text, _, mac = rest.partition(".")
        if _NONCE.fullmatch(nonce) is None or not issued_text.isdigit() or len(issued_text) > 12:
            return None
        if not hmac.compare_digest(mac, self._mac("signin", nonce, issued_text)):
            return None
        issued = int(issued_text)
        return nonce if issued <= now < issued + SIGNIN_SECONDS else None


def load_secret(source: KeyStore | Path, environ: Mapping[str, str] | None = None) -> bytes:
    """The signing secret: the environment's (or ``console.secret`` of ``contextstore.toml``),
    else the key store's (a ``Path``: the one beside that key file), made once and shared by
    every process reading the same store."""
    from contextstore.config.sources import load_settings

    env = os.environ if environ is None else environ
    configured = env.get(ENV_CONSOLE_SECRET) or load_settings(env)["console.secret"]
    if configured:
        if len(configured) < MIN_SECRET_CHARS:
            raise ConfigurationError(
                f"{ENV_CONSOLE_SECRET}: must be at least {MIN_SECRET_CHARS} characters"
            )
        return configured.encode("utf-8")
    store = FileKeyStore(source) if isinstance(source, Path) else source
    return store.console_secret()
