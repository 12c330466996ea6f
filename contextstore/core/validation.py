"""The checks every value entering the library passes, wherever it enters.

A caller's value that no database can hold (a NUL, a lone surrogate, an integer wider than a
64-bit column, a thousand filter keys) is refused here, by the library's own public
methods, with ``ValidationError`` naming the field: the service answers it 422 and the
command line as one ``error:`` line, and neither ever mistakes it for a database outage.
Pure: nothing here reads or writes anything but the values it is given.
"""

from __future__ import annotations

from typing import Final

from contextstore.errors import ValidationError

MAX_SQL_INTEGER: Final = 2**63 - 1
"""The largest integer both databases' BIGINT holds (and SQLite binds)."""

MAX_SCOPE_ENTITY_IDS: Final = 64
MAX_SCOPE_TAGS: Final = 64
MAX_SCOPE_VALUE_LENGTH: Final = 255
"""Bounds on an agent's scope, so no input makes the candidate lookup grow faster than
linearly: every entity id yields one key per segment, every tag one key."""


def storable_text(value: object, field: str) -> str:
    """``value`` if it is a string every database stores faithfully, else
    ``ValidationError(field)``: not a string, a NUL (PostgreSQL cannot hold one) or a lone
    surrogate (not valid Unicode, so not UTF-8: e.g. invalid bytes in a command-line
    argument)."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(field, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValidationError(
            field, f"is not valid Unicode text (lone surrogate at position {error.start})"
        ) from error
    return value


def optional_storable_text(value: object, field: str) -> str | None:
    """``storable_text``, with ``None`` accepted as it is."""
    return None if value is None else storable_text(value, field)


def check_integer(
    value: object, field: str, *, minimum: int = -MAX_SQL_INTEGER, maximum: int = MAX_SQL_INTEGER
) -> int:
    """``value`` if it is an integer (not a bool) from ``minimum`` to ``maximum``, else
    ``ValidationError(field)``. The default range is what a SQL BIGINT holds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {value!r}")
    if value > maximum:
        raise ValidationError(field, f"must be at most {maximum}, not {value}")
    if value < minimum:
        least = "zero or more" if minimum == 0 else f"at least {minimum}"
        raise ValidationError(field, f"must be {least}, not {value}")
    return value


def check_count(value: object, field: str) -> int:
    """A limit or an offset: an integer from 0 to ``MAX_SQL_INTEGER``."""
    return check_integer(value, field, minimum=0)


def check_optional_count(value: object, field: str) -> int | None:
    """``check_count``, with ``None`` (no limit) accepted as it is."""
    return None if value is None else check_count(value, field)


def check_scope_values(entity_ids: object, tags: object) -> None:
    """Refuse a scope beyond the documented bounds (``ValidationError("scope.entity_ids")``
    / ``("scope.tags")``): at most 64 entity ids and 64 tags, each a string of at most 255
    characters without NUL or lone surrogates."""
    for name, values, limit in (
        ("scope.entity_ids", entity_ids, MAX_SCOPE_ENTITY_IDS),
        ("scope.tags", tags, MAX_SCOPE_TAGS),
    ):
        if not isinstance(values, tuple | list):
            raise ValidationError(name, "must be a tuple of strings")
        if len(values) > limit:
            raise ValidationError(name, f"holds {len(values)} values; the limit is {limit}")
        for value in values:
            if not isinstance(value, str):
                raise ValidationError(name, f"must hold strings, got {type(value).__name__}")
            if len(value) > MAX_SCOPE_VALUE_LENGTH:
                raise ValidationError(
                    name,
                    f"a value is {len(value)} characters; the limit is {MAX_SCOPE_VALUE_LENGTH}",
                )
            storable_text(value, name)
