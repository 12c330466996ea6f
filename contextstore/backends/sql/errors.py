"""Driver errors → contextstore errors, in one place (docs/decisions/0082).

What a driver error means is read from tables: the dialect's ``ErrorCodes`` (locks,
conflicting transactions, undecodable text) and ``FIELD_BY_CONSTRAINT`` (which record field
a constraint or trigger guards). Every repository translates through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import sqlalchemy as sa
from sqlalchemy import exc

from contextstore.backends.sql.dialects import Dialect
from contextstore.backends.urls import mask_url
from contextstore.errors import BackendUnavailableError, ContextStoreError, ValidationError

__all__ = [
    "FIELD_BY_CONSTRAINT",
    "is_conflict",
    "is_lock",
    "is_undecodable",
    "translate_errors",
    "translate_metrics_error",
]

# Constraint and trigger names as they appear in driver messages → the record field at fault.
FIELD_BY_CONSTRAINT: Final = (
    ("ck_lessons_status", "status"),
    ("ck_lessons_severity", "severity"),
    ("ck_lessons_entity_id", "entity_id"),
    ("ck_lessons_superseded_by", "superseded_by"),
    ("lessons.superseded_by", "superseded_by"),
    ("fk_lessons_superseded_by", "superseded_by"),
    ("ck_lessons_injection_form_size", "injection_form"),
    ("ck_lesson_scopes_scope_key", "applies_to"),
    ("pk_lesson_scopes", "applies_to"),
    ("lesson_scopes.", "applies_to"),
    ("created_at is immutable", "created_at"),
    ("lesson lifecycle", "status"),
    ("lessons.created_at", "created_at"),
    ("lessons.updated_at", "updated_at"),
    ("lessons.evidence", "evidence"),
    ("append-only", "lesson_events"),
    ("immutable", "entity_id"),
    ("pk_lessons", "entity_id"),
    ("lessons.entity_id", "entity_id"),
)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, the errors it was raised from, and the driver error each wraps."""
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        orig = getattr(seen, "orig", None)
        if isinstance(orig, BaseException):
            yield orig
        seen = seen.__cause__


def is_lock(dialect: Dialect, error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) is a lock a retry may get."""
    fragments = dialect.errors.locked
    return bool(fragments) and any(
        fragment in str(part).lower() for part in _chain(error) for fragment in fragments
    )


def is_conflict(dialect: Dialect, error: BaseException) -> bool:
    """Whether ``error`` comes from a conflict with a concurrent transaction."""
    codes = dialect.errors.conflicts
    return bool(codes) and any(getattr(part, "sqlstate", None) in codes for part in _chain(error))


def is_undecodable(dialect: Dialect, error: BaseException) -> bool:
    """Whether ``error`` comes from stored text the driver could not decode."""
    fragments = dialect.errors.undecodable
    return any(fragment in str(part) for part in _chain(error) for fragment in fragments)


@contextmanager
def translate_errors(url: sa.URL | None = None) -> Iterator[None]:
    """Turn driver errors into contextstore errors at the storage boundary.

    An integrity error (a check constraint, a key, a trigger) becomes ``ValidationError``
    naming the field the constraint guards (``"record"`` when it cannot tell); a lost or
    refused connection becomes ``BackendUnavailableError``.
    """
    try:
        yield
    except exc.IntegrityError as error:
        message = str(error.orig)
        field = next((f for name, f in FIELD_BY_CONSTRAINT if name in message), "record")
        raise ValidationError(field, f"refused by the database: {message.strip()}") from error
    except (exc.DatabaseError, exc.InterfaceError) as error:
        where = f"database {mask_url(url)!r}" if url is not None else "the database"
        raise BackendUnavailableError(f"{where} is unavailable: {error.orig}") from error


def translate_metrics_error(error: exc.SQLAlchemyError) -> ContextStoreError:
    """The contextstore error for a driver error of a metrics statement."""
    if isinstance(error, exc.OperationalError | exc.InterfaceError):
        return BackendUnavailableError(f"metrics database unavailable: {error.orig}")
    detail = error.orig if isinstance(error, exc.DBAPIError) else error
    return ContextStoreError(f"metrics database error: {detail}")
