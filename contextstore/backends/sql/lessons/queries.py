"""How lessons are read from and written to their rows: statements, row decoding, and the
row writes the repository and the importer share. Module-level functions that take the
caller's session, so a repository joined to a caller's transaction runs the same code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.sql.dialects import Dialect, dialect_of
from contextstore.backends.sql.models import LessonEventRow, LessonRow, LessonScopeRow
from contextstore.backends.sql.unreadable import (
    SKIP_WARNINGS,
    UnreadableLesson,
    UnreadableRowError,
    check_text,
    escaped,
    printable,
    raw_text,
    read_audit_changes,
    read_evidence,
    read_timestamp,
)
from contextstore.core.filters import optional_choice
from contextstore.core.lessons import (
    SEVERITIES,
    STATUSES,
    LessonRecord,
    unrestorable,
    validate_entity_id,
    validate_evidence,
    validate_fields,
    validate_scope_key,
)
from contextstore.core.validation import check_count, check_optional_count, optional_storable_text
from contextstore.errors import NotFoundError, ValidationError

__all__ = [
    "EVENTS",
    "LESSONS",
    "MAX_SEARCH_CHARS",
    "SCOPES",
    "UNSET",
    "LessonEvent",
    "acting",
    "check_reference",
    "check_rows",
    "decode",
    "fetch",
    "history_query",
    "insert",
    "insert_many",
    "lesson_columns",
    "list_query",
    "load",
    "read_events",
    "require",
    "skipped",
    "update",
]

Records = list[LessonRecord]


class Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset()


@dataclass(frozen=True)
class LessonEvent:
    """One audit row (see ``LessonEventRow`` for what each event's ``changes`` holds)."""

    id: int
    lesson_id: str
    event: str
    old_status: str | None
    new_status: str | None
    occurred_at: datetime
    actor: str | None = None
    changes: Any = None


LESSONS: Final = cast(sa.Table, LessonRow.__table__)
SCOPES: Final = cast(sa.Table, LessonScopeRow.__table__)
EVENTS: Final = cast(sa.Table, LessonEventRow.__table__)
MAX_SEARCH_CHARS: Final = 200

# Scope keys are fetched for this many lessons per query (bind-parameter limits).
_CHUNK = 500


def list_query(
    *,
    status: str | None,
    severity: str | None,
    key: str | None,
    tag: str | None,
    limit: int | None,
    offset: int | None,
    search: str | None,
) -> sa.Select[Any]:
    """The SELECT of ``LessonRepository.list`` for these filters, each validated first
    (``ValidationError`` naming it)."""
    status = optional_choice("status", status, STATUSES)
    severity = optional_choice("severity", severity, SEVERITIES)
    keys = [validate_scope_key(k) for k in (key, None if tag is None else f"tag:{tag}") if k]
    optional_storable_text(key, "key")
    optional_storable_text(tag, "tag")
    check_optional_count(limit, "limit")
    if search is not None and (
        not isinstance(search, str) or "\x00" in search or len(search) > MAX_SEARCH_CHARS
    ):
        raise ValidationError(
            "search", f"must be text without NUL, at most {MAX_SEARCH_CHARS} characters"
        )
    optional_storable_text(search, "search")
    offset = check_count(0 if offset is None else offset, "offset")
    query = sa.select(LESSONS).limit(limit).offset(offset or None)
    if status is not None:
        query = query.where(LESSONS.c.status == status)
    if severity is not None:
        query = query.where(LESSONS.c.severity == severity)
    if search:
        # lower() on both sides, so the database folds case the same way for both.
        escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = sa.func.lower(sa.literal(f"%{escaped}%", sa.Text()))
        columns = (
            LESSONS.c.entity_id,
            LESSONS.c.summary,
            LESSONS.c.detail,
            LESSONS.c.injection_form,
        )
        query = query.where(
            sa.or_(*(sa.func.lower(column).like(pattern, escape="\\") for column in columns))
        )
    for scope_key in keys:
        query = query.where(
            LESSONS.c.entity_id.in_(
                sa.select(SCOPES.c.lesson_id).where(SCOPES.c.scope_key == scope_key)
            )
        )
    return query


def read_events(session: Session, query: sa.Select[Any]) -> list[LessonEvent]:
    """The audit rows ``history_query`` selects. An audit row keeps the old and new values
    as they were stored, bytes that are not UTF-8 included (typed into SQLite by hand):
    shown escaped, never dropped."""
    return [
        LessonEvent(
            **{
                name: escaped(read_audit_changes(value) if name == "changes" else value)
                for name, value in row._mapping.items()
            }
        )
        for row in session.execute(query)
    ]


def history_query(entity_id: str | None) -> sa.Select[Any]:
    """The audit rows, oldest first; of one lesson (even a deleted one) or of all.

    ``changes`` as text, decoded by the reader row by row: an old row copying evidence
    nested thousands deep shows that text rather than failing the whole history.
    """
    optional_storable_text(entity_id, "entity_id")
    columns = [column for column in EVENTS.c if column.name != "changes"]
    changes = raw_text(EVENTS.c.changes).label("changes")
    query = sa.select(*columns, changes).order_by(EVENTS.c.id)
    if entity_id is not None:
        query = query.where(EVENTS.c.lesson_id == entity_id)
    return query


def require(session: Session, entity_id: str, field: str = "entity_id") -> LessonRecord:
    validate_entity_id(entity_id, field)
    found = fetch(session, [entity_id])
    if not found:
        raise NotFoundError(f"{field}: no lesson {entity_id!r}")
    return found[0]


def check_reference(session: Session, record: LessonRecord) -> None:
    if record.superseded_by is not None and not fetch(session, [record.superseded_by]):
        raise ValidationError("superseded_by", f"no lesson {record.superseded_by!r}")


def fetch(session: Session, ids: Sequence[str]) -> Records:
    """The stored lessons among ``ids`` (absent ones skipped), ordered by entity_id.

    Looked up by primary key in chunks, so a long list never exceeds bind-parameter limits.
    """
    records: Records = []
    unique = sorted(set(ids))
    for start in range(0, len(unique), _CHUNK):
        query = sa.select(LESSONS).where(LESSONS.c.entity_id.in_(unique[start : start + _CHUNK]))
        records.extend(load(session, query))
    return records


def lesson_columns(dialect: Dialect) -> list[sa.ColumnElement[Any]]:
    """The ``lessons`` columns, timestamps and evidence in a form the driver cannot fail on."""
    c = LESSONS.c
    # As text on both: the driver would decode PostgreSQL's json for the whole result at once.
    evidence = dialect.json_as_text(c.evidence)
    return [
        c.entity_id,
        c.status,
        c.severity,
        c.injection_form,
        c.summary,
        c.detail,
        c.superseded_by,
        dialect.safe_timestamp(c.created_at).label("created_at"),
        dialect.safe_timestamp(c.updated_at).label("updated_at"),
        raw_text(c.created_at).label("created_at_raw"),
        raw_text(c.updated_at).label("updated_at_raw"),
        evidence.label("evidence"),
    ]


def decode(row: sa.Row[Any], keys: tuple[str, ...]) -> LessonRecord:
    """One row as a record; ``UnreadableRowError`` when a column cannot be read, or holds
    what an import would refuse (so an export never writes a line it cannot restore)."""
    for key in keys:
        check_text("applies_to", key)
    record = LessonRecord(
        entity_id=check_text("entity_id", row.entity_id),
        status=check_text("status", row.status),
        severity=check_text("severity", row.severity),
        injection_form=check_text("injection_form", row.injection_form),
        applies_to=keys,
        summary=check_text("summary", row.summary),
        detail=check_text("detail", row.detail),
        created_at=read_timestamp("created_at", row.created_at, row.created_at_raw),
        updated_at=read_timestamp("updated_at", row.updated_at, row.updated_at_raw),
        superseded_by=check_text("superseded_by", row.superseded_by),
        evidence=read_evidence(row.evidence),
    )
    # Evidence read_evidence decoded is JSON-native, finite and at most 64 deep; only a \u
    # escape (NUL, a lone surrogate) could still make an import refuse it.
    try:
        validate_fields(record)
        if "\\u" in row.evidence:
            validate_evidence(record.evidence)
        return record
    except ValidationError as error:
        value = getattr(record, error.field, None)
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        raise UnreadableRowError(error.field, shown, error.message) from error


def load(session: Session, query: sa.Select[Any], *, skip: bool = False) -> Records:
    """Records for the ``lessons`` rows ``query`` selects, ordered by entity_id (code point),
    each with its scope keys in their stored order.

    A row that cannot be read is skipped with a rate-limited WARNING when ``skip`` is set
    (listing, exporting); otherwise it raises ``ValidationError`` naming the column (a lesson
    asked for by id, or about to be written).
    """
    dialect = dialect_of(session.get_bind())
    query = query.with_only_columns(*lesson_columns(dialect))
    rows = session.execute(query.order_by(dialect.by_code_point(LESSONS.c.entity_id))).all()
    # An id that is not UTF-8 cannot even be sent back to look up the lesson's scope keys.
    readable = []
    for row in rows:
        try:
            check_text("entity_id", row.entity_id)
            readable.append(row)
        except UnreadableRowError as error:
            _unreadable(row.entity_id, error, skip)
    rows = readable
    keys: dict[str, list[str]] = {row.entity_id: [] for row in rows}
    ids = list(keys)
    for start in range(0, len(ids), _CHUNK):
        scope_rows = session.execute(
            sa.select(SCOPES.c.lesson_id, SCOPES.c.scope_key)
            .where(SCOPES.c.lesson_id.in_(ids[start : start + _CHUNK]))
            .order_by(SCOPES.c.lesson_id, SCOPES.c.position)
        )
        for lesson_id, scope_key in scope_rows:
            keys[lesson_id].append(scope_key)
    records: Records = []
    for row in rows:
        try:
            records.append(decode(row, tuple(keys[row.entity_id])))
        except UnreadableRowError as error:
            _unreadable(row.entity_id, error, skip)
    return records


def skipped(entity_id: str, error: UnreadableRowError) -> None:
    """A rate-limited WARNING that the lesson ``entity_id`` is left out, and why."""
    SKIP_WARNINGS.skipped(printable(entity_id), error)


def _unreadable(entity_id: str, error: UnreadableRowError, skip: bool) -> None:
    """A rate-limited WARNING when ``skip``, else ``ValidationError`` naming the column."""
    if not skip:
        raise ValidationError(
            error.column,
            f"lesson {printable(entity_id)!r} is stored with an unreadable {error}; "
            "fix the row in SQL (contextstore db check lists such rows)",
        ) from error
    skipped(entity_id, error)


def check_rows(session: Session) -> list[UnreadableLesson]:
    """Every lesson row a reader would skip or an export leave out, ordered by entity_id."""
    dialect = dialect_of(session.get_bind())
    query = sa.select(*lesson_columns(dialect)).order_by(dialect.by_code_point(LESSONS.c.entity_id))
    keys: dict[str, list[str]] = {}
    for lesson_id, scope_key in session.execute(sa.select(SCOPES.c.lesson_id, SCOPES.c.scope_key)):
        keys.setdefault(lesson_id, []).append(scope_key)
    # In the database's order; the lessons that read are judged together once all are read.
    rows: list[UnreadableLesson | LessonRecord] = []
    for row in session.execute(query):
        try:
            rows.append(decode(row, tuple(keys.get(row.entity_id, ()))))
        except UnreadableRowError as error:
            value = error.value if isinstance(error.value, str) else json.dumps(error.value)
            entity_id = printable(row.entity_id)
            rows.append(UnreadableLesson(entity_id, error.column, value, error.reason))
    skipped = unrestorable(row for row in rows if isinstance(row, LessonRecord))
    return [
        row
        if isinstance(row, UnreadableLesson)
        else UnreadableLesson(
            row.entity_id, "superseded_by", row.superseded_by or "", skipped[row.entity_id]
        )
        for row in rows
        if isinstance(row, UnreadableLesson) or row.entity_id in skipped
    ]


def _columns(record: LessonRecord) -> dict[str, Any]:
    return {
        "status": record.status,
        "severity": record.severity,
        "updated_at": record.updated_at,
        "summary": record.summary,
        "detail": record.detail,
        "injection_form": record.injection_form,
        "superseded_by": record.superseded_by,
        "evidence": record.evidence,
    }


def insert(session: Session, record: LessonRecord) -> None:
    session.execute(
        sa.insert(LESSONS).values(
            entity_id=record.entity_id, created_at=record.created_at, **_columns(record)
        )
    )
    _insert_keys(session, record)


def insert_many(session: Session, records: Records) -> None:
    """Insert ``records`` (referents first) with two executemany statements, not 2 per lesson."""
    if not records:
        return
    session.execute(
        sa.insert(LESSONS),
        [
            {"entity_id": record.entity_id, "created_at": record.created_at, **_columns(record)}
            for record in records
        ],
    )
    keys = [
        {"lesson_id": record.entity_id, "scope_key": key, "position": position}
        for record in records
        for position, key in enumerate(record.applies_to)
    ]
    if keys:
        session.execute(sa.insert(SCOPES), keys)


def _insert_keys(session: Session, record: LessonRecord) -> None:
    if record.applies_to:
        session.execute(
            sa.insert(SCOPES),
            [
                {"lesson_id": record.entity_id, "scope_key": key, "position": position}
                for position, key in enumerate(record.applies_to)
            ],
        )


def update(session: Session, current: LessonRecord, wanted: LessonRecord) -> None:
    """Write ``wanted`` over ``current``: only the lessons row, plus keys if they changed.

    ``entity_id`` and ``created_at`` are never in the SET list (the trigger would refuse).
    """
    session.execute(
        sa.update(LESSONS)
        .where(LESSONS.c.entity_id == current.entity_id)
        .values(**_columns(wanted))
    )
    if wanted.applies_to == current.applies_to:
        return
    # Only the keys that really come or go are deleted and inserted, so the audit lists exactly
    # those; kept keys only move (their position is not audited).
    entity_id = current.entity_id
    gone = sorted(set(current.applies_to) - set(wanted.applies_to))
    if gone:
        session.execute(
            sa.delete(SCOPES).where(SCOPES.c.lesson_id == entity_id, SCOPES.c.scope_key.in_(gone))
        )
    old_positions = {key: position for position, key in enumerate(current.applies_to)}
    added = []
    for position, key in enumerate(wanted.applies_to):
        if key not in old_positions:
            added.append({"lesson_id": entity_id, "scope_key": key, "position": position})
        elif old_positions[key] != position:
            session.execute(
                sa.update(SCOPES)
                .where(SCOPES.c.lesson_id == entity_id, SCOPES.c.scope_key == key)
                .values(position=position)
            )
    if added:
        session.execute(sa.insert(SCOPES), added)


@contextmanager
def acting(session: Session, actor: str) -> Iterator[None]:
    """Name ``actor`` to the audit triggers for the writes inside the block (see
    ``Dialect.name_actor``), forgotten again when it ends: a caller's transaction may go on
    with writes of its own, which are not ours. On a failure the rollback of the
    transaction (or savepoint) undoes it."""
    dialect = dialect_of(session.get_bind())
    dialect.name_actor(session, actor)
    yield
    dialect.forget_actor(session)
