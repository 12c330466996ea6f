"""Lesson rows the library cannot read, and how readers step around them.

A row typed by hand (``created_at = 'yesterday'`` in an old SQLite file, ``'infinity'`` in
psql, evidence that is not JSON) must not stop the fleet: readers decode each row on its
own, skip one they cannot read, and log one WARNING per lesson per ``WARNING_INTERVAL_S``.
``contextstore db check`` lists such rows with the reason (``LessonRepository.check``).

Timestamps are fetched in a form that cannot fail in the driver: SQLite hands back its text,
which is parsed here; PostgreSQL hands back NULL for a value Python's ``datetime`` cannot hold
(``infinity``, before year 1, after 9998) and the raw text beside it for the report.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa

logger = logging.getLogger("contextstore.lessons")

WARNING_INTERVAL_S: Final = 60.0
# PostgreSQL instants Python can hold in any time zone: a day of margin at both ends.
_PG_EARLIEST: Final = "0001-01-02 00:00:00+00"
_PG_LATEST: Final = "9999-12-30 00:00:00+00"


class UnreadableRowError(ValueError):
    """One column of one lesson row cannot be read; ``column`` and ``reason`` say why."""

    def __init__(self, column: str, value: object, reason: str) -> None:
        self.column = column
        self.value = value
        self.reason = reason
        super().__init__(f"{column} {value!r}: {reason}")


@dataclass(frozen=True)
class UnreadableLesson:
    """A lesson row readers skip: its id, the column at fault, the stored value, why."""

    entity_id: str
    column: str
    value: str
    reason: str


def safe_timestamp(column: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[Any]:
    """``column`` fetched so the driver never fails on it (see the module docstring)."""
    if dialect == "postgresql":
        readable = sa.and_(
            sa.func.isfinite(column),
            column >= sa.cast(sa.literal(_PG_EARLIEST), column.type),
            column < sa.cast(sa.literal(_PG_LATEST), column.type),
        )
        return sa.case((readable, column), else_=sa.null())
    return sa.type_coerce(column, sa.String())


def raw_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """The stored value as text, for reports."""
    return sa.cast(column, sa.Text())


def read_timestamp(column: str, value: object, raw: object) -> datetime:
    """An aware UTC ``datetime`` from what ``safe_timestamp`` fetched.

    ``raw`` is the stored text (reported when PostgreSQL handed back NULL).
    """
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if value is None:
        raise UnreadableRowError(column, raw, "outside the years 1–9998 a lesson may carry")
    if not isinstance(value, str):
        raise UnreadableRowError(column, value, "is not a timestamp")
    try:
        moment = datetime.fromisoformat(value)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError) as error:
        reason = f"is not an ISO 8601 timestamp ({error})"
        raise UnreadableRowError(column, value, reason) from error


def read_evidence(value: object, dialect: str) -> Any:
    """``evidence`` as stored: PostgreSQL's json is already decoded; SQLite's is text."""
    if dialect == "postgresql":
        return value
    if not isinstance(value, str):
        raise UnreadableRowError("evidence", value, "is not JSON text")
    try:
        return json.loads(value)
    except ValueError as error:
        raise UnreadableRowError("evidence", value, f"is not JSON ({error})") from error


class SkipWarnings:
    """One WARNING per lesson per ``interval`` seconds, however many readers meet it."""

    def __init__(
        self, interval: float = WARNING_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def skipped(self, entity_id: str, error: UnreadableRowError) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(entity_id)
            if last is not None and now - last < self._interval:
                return
            self._last[entity_id] = now
        logger.warning(
            "lesson %r skipped: %s (contextstore db check lists such rows)", entity_id, error
        )


SKIP_WARNINGS: Final = SkipWarnings()
