"""Service URLs made safe to print: the one place that hides their secrets.

Every message, header and log line that shows a Redis or SQL URL goes through ``mask_url``.
A secret can sit in the user info (``redis://:secret@host``) or in a query parameter
(``postgresql://u@host/db?password=secret``, ``?sslpassword=…``, ``?token=…``); both become
``***``. The user info is found by reading the text, not by a URL parser, so a URL no
parser accepts (no scheme, a bad port, a password with ``/`` in it) is masked as well.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, quote

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
    with its password) with every secret replaced by ``***``.

    Read as text, never trusting a parser to find the secret: the user info is whatever
    precedes the last ``@`` (after ``scheme://`` when there is one), so ``alice:pw@host``
    without a scheme, a password holding ``/``, ``?`` or ``@`` unescaped, and a port that is
    not a number are masked alike (``alice:***@host``); an ``@`` in a query parameter masks
    more than the password, never less. A user name alone is kept. Query parameters named
    like a secret are masked too.
    """
    text = url.render_as_string(hide_password=False) if hasattr(url, "render_as_string") else url
    if not isinstance(text, str):
        return "<unparseable URL>"
    scheme_end = text.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else (2 if text.startswith("//") else 0)
    at = text.rfind("@", start)
    host = start
    if at >= 0 and ":" in text[start:at]:
        user = text[start:at].split(":", 1)[0]
        text = f"{text[:start]}{user}:{MASK}{text[at:]}"
        host = start + len(user) + len(MASK) + 2
    head, mark, query = text[host:].partition("?")
    query, hash_mark, fragment = query.partition("#")
    return text[:host] + head + mark + _masked_query(query) + hash_mark + fragment


def _masked_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(_is_secret(name) for name, _ in pairs):
        return query
    return "&".join(
        f"{quote(name, safe='')}={MASK if _is_secret(name) else quote(value, safe='')}"
        for name, value in pairs
    )
