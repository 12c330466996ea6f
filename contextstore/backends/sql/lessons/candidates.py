"""The candidate read: the lessons sharing a key with a scope, one statement on each dialect.

Both dialects pin the join order: ix_lesson_scopes_scope_key first, then each lesson by
primary key, whatever the planner statistics say (none at all on a database never ANALYZEd,
where ``status = 'active'`` looks selective and a free planner walks every active lesson,
through ix_lessons_status or a scan). Both bind the keys as ONE parameter, so the statement
text is the same for every scope and nothing is rendered per call. The statements themselves
are the dialect's (``Dialect.candidate_sql``).

Candidate rows come from the driver as plain tuples (the run's hot path reads them without
SQLAlchemy's row objects), so their columns are read by the names below, not by number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa

from contextstore.backends.sql.dialects import DIALECTS, Dialect, dialect_of
from contextstore.backends.sql.lessons.queries import skipped
from contextstore.backends.sql.unreadable import UnreadableRowError, check_text, read_timestamp
from contextstore.core.lessons import format_timestamp
from contextstore.core.matching import Lesson

__all__ = [
    "CREATED_AT",
    "ENTITY_ID",
    "INJECTION_FORM",
    "SCOPE_KEY",
    "SEEN_LESSONS",
    "SEVERITY",
    "STATUS",
    "SUMMARY",
    "candidate_lessons",
    "candidate_sql",
    "candidates_statement",
    "keys_parameter",
    "select_candidates",
]

Lessons = list[Lesson]

# The columns of a candidate row, by position (``Dialect.candidate_sql``).
ENTITY_ID: Final = 0
SEVERITY: Final = 1
CREATED_AT: Final = 2
INJECTION_FORM: Final = 3
SCOPE_KEY: Final = 4
SUMMARY: Final = 5
STATUS: Final = 6
"""With ``include_inactive`` only; the joint run read has the knowledge generation there."""

_STATEMENTS: Final = {
    (dialect.name, any_status): sa.text(dialect.candidate_sql(any_status=any_status))
    for dialect in DIALECTS.values()
    for any_status in (False, True)
}


def candidate_sql(dialect: Dialect | str, extra: str = "") -> str:
    """The candidate lookup's SQL text; ``extra`` (``", <expression>"``) adds a column.
    ``dialect`` here and below: the database's (``dialect_of``), or its name."""
    return dialect_of(dialect).candidate_sql(extra)


def keys_parameter(dialect: Dialect | str, keys: Sequence[str]) -> list[str] | str:
    """The ``:keys`` value of ``candidate_sql``: a text[] on PostgreSQL, JSON on SQLite."""
    return dialect_of(dialect).keys_parameter(keys)


def candidates_statement(dialect: Dialect | str, include_inactive: bool = False) -> sa.TextClause:
    """The compiled-once candidate lookup of ``dialect`` (of every status: ``include_inactive``)."""
    return _STATEMENTS[dialect_of(dialect).name, include_inactive]


def select_candidates(
    connection: sa.Connection, keys: Sequence[str], include_inactive: bool = False
) -> Sequence[sa.Row[Any]]:
    """Rows (entity_id, severity, created_at, injection_form, scope_key, summary), one per
    matched key; with ``include_inactive``, lessons of any status and their status last."""
    dialect = dialect_of(connection)
    statement = candidates_statement(dialect, include_inactive)
    return connection.execute(statement, {"keys": dialect.keys_parameter(keys)}).all()


def candidate_lessons(rows: Iterable[Sequence[Any]]) -> Lessons:
    """``Lesson``s from ``select_candidates`` rows: one per entity_id (code-point order), its
    matched keys sorted, so the result does not depend on the plan's row order."""
    found: dict[str, Sequence[Any]] = {}
    matched: dict[str, list[str]] = {}
    for row in rows:
        keys = matched.get(row[ENTITY_ID])
        if keys is None:
            found[row[ENTITY_ID]] = row
            matched[row[ENTITY_ID]] = [row[SCOPE_KEY]]
        else:
            keys.append(row[SCOPE_KEY])
    lessons: Lessons = []
    for entity_id in sorted(found):
        row = found[entity_id]
        severity, created_at = row[SEVERITY], row[CREATED_AT]
        injection_form, summary = row[INJECTION_FORM], row[SUMMARY]
        # The default statement selects active lessons only and leaves the status out.
        status = row[STATUS] if len(row) > STATUS else "active"
        applies_to = tuple(sorted(matched[entity_id]))
        seen = (entity_id, status, severity, created_at, applies_to, injection_form, summary)
        lesson = _SEEN_LESSONS.get(seen)
        if lesson is None:
            try:
                lesson = Lesson(
                    entity_id=check_text("entity_id", entity_id),
                    status=check_text("status", status),
                    severity=check_text("severity", severity),
                    created_at=_rfc3339(created_at),
                    applies_to=applies_to,
                    injection_form=check_text("injection_form", injection_form),
                    summary=check_text("summary", summary),
                )
            except UnreadableRowError as error:
                skipped(entity_id, error)
                continue
            if len(_SEEN_LESSONS) >= SEEN_LESSONS:
                _SEEN_LESSONS.clear()
            _SEEN_LESSONS[seen] = lesson
        lessons.append(lesson)
    return lessons


SEEN_LESSONS = 4096
"""Most ``Lesson``s ``candidate_lessons`` keeps by the values they were made from."""
# Every run reads its candidates again, and a fleet's runs see the same lessons again and
# again: the same values make the same (immutable) ``Lesson``, so it is made once, not
# checked and built again for each run. Any change of a value is a different key.
_SEEN_LESSONS: dict[tuple[Any, ...], Lesson] = {}


def _rfc3339(value: datetime | str | None) -> str:
    """A raw ``created_at`` rendered as ``LessonRecord.to_lesson()`` renders it.

    PostgreSQL hands back an aware ``datetime``. SQLite hands back the stored text, naive UTC,
    which is read as ``UTCDateTime`` reads it (``datetime.fromisoformat``, UTC attached when
    naive) — except the form ``UTCDateTime`` itself writes, ``YYYY-MM-DD HH:MM:SS.ffffff``,
    which is rewritten by slicing to the same string, several times faster.
    """
    if isinstance(value, datetime):
        return format_timestamp(value)
    if (
        isinstance(value, str)
        and len(value) == 26
        and value[10] == " "
        and value[19] == "."
        and value[20:].isdigit()
    ):
        return f"{value[:10]}T{value[11:]}+00:00"
    return format_timestamp(read_timestamp("created_at", value, value))
