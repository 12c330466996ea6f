"""Lesson rows the library cannot read, and how readers step around them.

A row typed by hand (``created_at = 'yesterday'`` in an old SQLite file, ``'infinity'`` in
psql, evidence that is not JSON) must not stop the fleet: readers decode each row on its
own, skip one they cannot read, and log one WARNING per lesson per ``WARNING_INTERVAL_S``.
``contextstore db check`` lists such rows with the reason (``LessonRepository.check``).

Text that is not UTF-8 (bytes typed into SQLite by hand: PostgreSQL refuses them) reaches
the readers as lone surrogates (the SQLite connection decodes with surrogateescape, see
``backends.sql.database``); ``check_text`` turns such a value into an unreadable column.

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

from contextstore.backends.sql.dialects import dialect_of
from contextstore.core.lessons import MAX_EVIDENCE_DEPTH, check_evidence, load_evidence
from contextstore.errors import ValidationError

logger = logging.getLogger("contextstore.core.lessons")

WARNING_INTERVAL_S: Final = 60.0
MAX_TERM_COUNT: Final = 2**31 - 1


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
    """``column`` fetched so the driver never fails on it (``Dialect.safe_timestamp``)."""
    return dialect_of(dialect).safe_timestamp(column)


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


def check_text(column: str, value: Any) -> Any:
    """``value`` unchanged, unless it is text holding bytes that were not UTF-8."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise UnreadableRowError(column, printable(value), "is not valid UTF-8") from error
    return value


def read_count(text: str) -> int:
    """``check_count`` of a count fetched as its JSON text (``KnowledgeStrategy.term_count``)."""
    if len(text) <= 10 and text.isascii() and text.isdigit():
        return check_count(int(text))  # what the library writes, read without a JSON decoder
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        shown = shortened(printable(text))
        raise UnreadableRowError("term_counts", shown, "is not JSON") from error
    return check_count(value)


def check_count(value: Any) -> int:
    """A chunk's count of one term as fetched (``term_counts``): a whole number from 1 to
    ``MAX_TERM_COUNT``; JSON ``true`` reads as 1, as SQLite's ``json_extract`` gives it."""
    if isinstance(value, int | float) and 1 <= value <= MAX_TERM_COUNT and value == int(value):
        return int(value)
    reason = f"is not a whole number from 1 to {MAX_TERM_COUNT:,}"
    raise UnreadableRowError("term_counts", shortened(printable(str(value))), reason)


def printable(value: str) -> str:
    """``value`` with each byte that was not UTF-8 shown as ``\\xNN``: safe to print."""
    raw = value.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "backslashreplace")


def check_json(column: str, value: Any) -> Any:
    """``value`` (decoded JSON) unchanged, unless a string in it holds bytes not UTF-8."""
    if isinstance(value, str):
        check_text(column, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(column, key)
            check_json(column, item)
    elif isinstance(value, list):
        for item in value:
            check_json(column, item)
    return value


def escaped(value: Any) -> Any:
    """``value`` (text, or decoded JSON) with every string made ``printable``: for what is
    shown as it is stored (the audit's old and new values) rather than skipped."""
    if isinstance(value, str):
        return value if value.isascii() else printable(value)
    if isinstance(value, dict):
        return {escaped(key): escaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [escaped(item) for item in value]
    return value


def read_evidence(value: object) -> Any:
    """``evidence`` from its stored JSON text (both dialects fetch it as text, so a row
    nested thousands deep fails here, for that row alone, not in the driver for the whole
    query). ``null`` reads as ``{}``, as an import reads it. Refused, as an import refuses
    them: text that is not JSON, nesting deeper than ``MAX_EVIDENCE_DEPTH``, a number beyond
    a 64-bit float (``1e400``)."""
    if not isinstance(value, str):
        raise UnreadableRowError("evidence", value, "is not JSON text")
    check_text("evidence", value)
    try:
        evidence = load_evidence(value)
    except ValidationError as error:
        raise UnreadableRowError("evidence", shortened(value), error.message) from error
    return {} if evidence is None else evidence


def read_audit_changes(text: str | None) -> Any:
    """An audit row's ``changes`` from its text, or that text (shortened) when it cannot be
    decoded: an old row copying evidence nested thousands deep is shown, not a failure.
    ``changes`` holds evidence at most two levels down (``{"evidence": {"new": …}}``)."""
    if text is None:
        return None
    try:
        return check_evidence(json.loads(text), MAX_EVIDENCE_DEPTH + 2)
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        return shortened(text)


def shortened(text: str, limit: int = 200) -> str:
    """``text``, cut to ``limit`` characters with a note of how long it was: for reports."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


class SkipWarnings:
    """One WARNING per row per ``interval`` seconds, however many readers meet it.

    ``what`` names the kind of row in the message (``lesson``, ``document``), ``log`` is the
    logger it goes to and ``hint`` what to do about it.
    """

    def __init__(
        self,
        interval: float = WARNING_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        what: str = "lesson",
        log: logging.Logger = logger,
        hint: str = "contextstore db check lists such rows",
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._what = what
        self._log = log
        self._hint = hint
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def skipped(self, entity_id: str, error: UnreadableRowError) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(entity_id)
            if last is not None and now - last < self._interval:
                return
            self._last[entity_id] = now
        self._log.warning("%s %r skipped: %s (%s)", self._what, entity_id, error, self._hint)


SKIP_WARNINGS: Final = SkipWarnings()
# Documents and passages of the knowledge base typed by hand (SQLite): list and search skip them.
DOCUMENT_WARNINGS: Final = SkipWarnings(
    what="document",
    log=logging.getLogger("contextstore.core.knowledge"),
    hint="fix or re-import it",
)
