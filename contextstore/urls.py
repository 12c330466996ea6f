"""Service URLs made safe to print: the one place that hides their secrets.

Every message, header and log line that shows a Redis or SQL URL goes through ``mask_url``.
A secret can sit in the user info (``redis://:secret@host``) or in a query parameter
(``postgresql://u@host/db?password=secret``, ``?sslpassword=…``, ``?token=…``); both become
``***``. A URL that cannot be parsed is not echoed at all.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

MASK: Final = "***"
# Query parameters whose value is a secret: exact names, and any name containing one of
# these words (``sslpassword``, ``auth_token``).
_SECRET_WORDS: Final = ("password", "passwd", "pwd", "secret", "token", "apikey", "api_key")
_SECRET_NAMES: Final = frozenset({"pass", "key", "auth"})


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(word in lowered for word in _SECRET_WORDS)


def mask_url(url: object) -> str:
    """``url`` (a string or anything whose ``str`` is one, e.g. SQLAlchemy's ``URL`` rendered
    with its password) with every secret replaced by ``***``."""
    text = url.render_as_string(hide_password=False) if hasattr(url, "render_as_string") else url
    if not isinstance(text, str):
        return "<unparseable URL>"
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return "<unparseable URL>"
    changed = parts
    if password is not None:
        userinfo, _, hostinfo = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        changed = changed._replace(netloc=f"{user}:{MASK}@{hostinfo}")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(_is_secret(name) for name, _ in pairs):
        query = "&".join(
            f"{quote(name, safe='')}={MASK if _is_secret(name) else quote(value, safe='')}"
            for name, value in pairs
        )
        changed = changed._replace(query=query)
    # Unchanged URLs are returned as given: urlunsplit would drop the "//" of sqlite:///x.db.
    return text if changed is parts else urlunsplit(changed)
