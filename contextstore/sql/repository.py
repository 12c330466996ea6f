"""``LessonRepository``: lessons in SQL (SPEC §2.3), one transaction per public method.

Session pattern: ``LessonRepository(engine)`` opens and commits its own transaction for every
public method, so ``store.lessons.add(record)`` just works. To make lesson writes part of a
larger unit of work, ``repository.using(session)`` returns a repository that runs inside the
caller's ``Session``: each write is wrapped in a SAVEPOINT (a refused write leaves the
caller's transaction usable), flushed, and committed only when the caller commits.

Every write validates first (``contextstore.lessons.validate_record``) and raises
``ValidationError`` naming the field before touching the database; constraint violations the
database still finds are translated the same way. A missing lesson raises ``NotFoundError``.
The audit rows in ``lesson_events`` are written by database triggers, not by this class; the
repository tells them its ``actor`` (default: the operating-system user) for every write
transaction: on PostgreSQL as the transaction setting ``contextstore.actor``, on SQLite as the
row of ``lesson_audit_actor``, written first and removed before the transaction commits (see
migration 0003). Status changes follow the lifecycle (``contextstore.lessons.TRANSITIONS``),
checked here first for a clear message and enforced by the database for everyone else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.errors import NotFoundError, ValidationError
from contextstore.lessons import (
    SEVERITIES,
    STATUSES,
    LessonRecord,
    check_transition,
    default_actor,
    format_timestamp,
    read_jsonl,
    validate_actor,
    validate_entity_id,
    validate_record,
    validate_scope_key,
    write_jsonl,
)
from contextstore.matching import Lesson, Scope, lookup_keys
from contextstore.sql.database import autocommit, read_only, translate_errors
from contextstore.sql.models import SQLITE_ACTOR_TABLE, LessonEventRow, LessonRow, LessonScopeRow

Clock = Callable[[], datetime]
# Aliases, because inside LessonRepository the name ``list`` is the method.
Records = list[LessonRecord]
Lessons = list[Lesson]

LESSONS: Final = cast(sa.Table, LessonRow.__table__)
SCOPES: Final = cast(sa.Table, LessonScopeRow.__table__)
EVENTS: Final = cast(sa.Table, LessonEventRow.__table__)

# Scope keys are fetched for this many lessons per query (bind-parameter limits).
_CHUNK = 500


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


def utc_now() -> datetime:
    return datetime.now(UTC)


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


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: lessons ``added``, ``updated``, and left ``unchanged``."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        """Records in the import."""
        return self.added + self.updated + self.unchanged

    @property
    def written(self) -> int:
        """Records that changed the database (added or updated)."""
        return self.added + self.updated


Events = list[LessonEvent]


class LessonRepository:
    """Lessons in SQL; implements ``LessonSource`` (``candidates``) for the engine."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: Clock = utc_now,
        session: Session | None = None,
        actor: str | None = None,
    ) -> None:
        """``actor`` names who writes, in the audit; ``None`` means the operating-system user.

        A blank, over-long (> 255 characters) or control-character actor is refused
        (``ValidationError("actor")``).
        """
        self._engine = engine
        self._clock = clock
        self._session = session
        self._actor = default_actor() if actor is None else validate_actor(actor)

    @property
    def actor(self) -> str:
        """Who this repository's writes are attributed to in ``lesson_events``."""
        return self._actor

    def using(self, session: Session) -> LessonRepository:
        """This repository joined to the caller's ``session`` (the caller commits)."""
        return LessonRepository(self._engine, clock=self._clock, session=session, actor=self._actor)

    def as_actor(self, actor: str) -> LessonRepository:
        """This repository with its writes attributed to ``actor``."""
        return LessonRepository(self._engine, clock=self._clock, session=self._session, actor=actor)

    # -- transactions -----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with translate_errors(self._engine.url):
            if self._session is not None:
                with self._session.begin_nested(), _acting(self._session, self._actor):
                    yield self._session
                    self._session.flush()
                return
            with (
                Session(self._engine) as session,
                session.begin(),
                _acting(session, self._actor),
            ):
                yield session

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with translate_errors(self._engine.url):
            if self._session is not None:
                yield self._session
                return
            with Session(read_only(self._engine)) as session, session.begin():
                yield session

    # -- reads ------------------------------------------------------------------------------

    def get(self, entity_id: str) -> LessonRecord:
        """The lesson ``entity_id``; ``NotFoundError`` when there is none."""
        with self._read() as session:
            return _require(session, entity_id)

    def list(
        self,
        *,
        status: str | None = None,
        severity: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
    ) -> Records:
        """Lessons ordered by entity_id, filtered by exact status, severity and scope key.

        ``tag="x"`` is shorthand for ``key="tag:x"``; giving both requires both. ``limit`` of
        ``None`` means all; a negative limit is refused.
        """
        if status is not None and status not in STATUSES:
            raise ValidationError("status", f"{status!r} is not one of {', '.join(STATUSES)}")
        if severity is not None and severity not in SEVERITIES:
            raise ValidationError("severity", f"{severity!r} is not one of {', '.join(SEVERITIES)}")
        keys = [validate_scope_key(k) for k in (key, None if tag is None else f"tag:{tag}") if k]
        if limit is not None and limit < 0:
            raise ValidationError("limit", f"must be zero or more, not {limit}")
        query = sa.select(LESSONS).limit(limit)
        if status is not None:
            query = query.where(LESSONS.c.status == status)
        if severity is not None:
            query = query.where(LESSONS.c.severity == severity)
        for scope_key in keys:
            query = query.where(
                LESSONS.c.entity_id.in_(
                    sa.select(SCOPES.c.lesson_id).where(SCOPES.c.scope_key == scope_key)
                )
            )
        with self._read() as session:
            return _load(session, query)

    def export_records(self) -> Records:
        """Every lesson, ordered by entity_id."""
        return self.list()

    def export_jsonl(self) -> Iterator[str]:
        """Every lesson as a JSON line (``write_jsonl``), ordered by entity_id."""
        return write_jsonl(self.export_records())

    def history(self, entity_id: str | None = None) -> Events:
        """Audit rows, oldest first; for one lesson (even a deleted one) or for all."""
        query = sa.select(EVENTS).order_by(EVENTS.c.id)
        if entity_id is not None:
            query = query.where(EVENTS.c.lesson_id == entity_id)
        with self._read() as session:
            return [LessonEvent(**row._mapping) for row in session.execute(query)]

    def events_count(self, event: str | None = None) -> int:
        """How many audit rows there are (of one ``event`` kind when given)."""
        query = sa.select(sa.func.count()).select_from(EVENTS)
        if event is not None:
            query = query.where(EVENTS.c.event == event)
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    def candidates(self, scope: Scope) -> Lessons:
        """Active lessons sharing a key with ``lookup_keys(scope)``, ordered by entity_id.

        One statement, whatever the number of matches: it starts from
        ``ix_lesson_scopes_scope_key`` and fetches each matching lesson by primary key, so it
        never scans ``lessons`` (see ``_CANDIDATES``). Only the columns the matcher reads are
        fetched. A lesson matched through several keys is returned once.

        ``applies_to`` of each returned ``Lesson`` holds only the lesson's keys that are in
        ``lookup_keys(scope)`` (sorted), not all of its keys: that is all ``match`` needs,
        since one matching key makes a lesson eligible. Use ``get``/``list`` for the full
        record. ``created_at`` is the RFC 3339 string ``LessonRecord.to_lesson()`` gives.

        An empty scope has no keys and returns ``[]`` without a query. Inside ``using(session)``
        the read runs in the caller's transaction and sees its uncommitted writes; otherwise it
        runs alone in autocommit (no ORM session, no BEGIN/COMMIT round trips): one
        statement, one round trip.
        """
        keys = sorted(lookup_keys(scope))
        if not keys:
            return []
        with translate_errors(self._engine.url):
            if self._session is not None:
                rows = _select_candidates(self._session.connection(), keys)
            else:
                with autocommit(self._engine).connect() as connection:
                    rows = _select_candidates(connection, keys)
        return _candidate_lessons(rows)

    # -- writes -----------------------------------------------------------------------------

    def add(self, record: LessonRecord) -> LessonRecord:
        """Insert a new lesson and return it as stored.

        ``created_at`` defaults to now (UTC) and an explicit one is kept; ``updated_at``
        defaults to ``created_at``. An existing entity_id is refused (``entity_id``); a
        ``superseded_by`` naming no lesson is refused (``superseded_by``).
        """
        record = _stamped(validate_record(record), self._clock())
        with self._write() as session:
            if _fetch(session, [record.entity_id]):
                raise ValidationError("entity_id", f"lesson {record.entity_id!r} already exists")
            _check_reference(session, record)
            _insert(session, record)
        return record

    def update(
        self,
        entity_id: str,
        *,
        summary: str | _Unset = UNSET,
        detail: str | _Unset = UNSET,
        injection_form: str | _Unset = UNSET,
        severity: str | _Unset = UNSET,
        applies_to: Sequence[str] | _Unset = UNSET,
        evidence: Any = UNSET,
    ) -> LessonRecord:
        """Change content fields; ``updated_at`` is always bumped, ``created_at`` never moves.

        Status has its own methods (``activate``, ``retire``, ``supersede``).
        """
        given: dict[str, Any] = {
            "summary": summary,
            "detail": detail,
            "injection_form": injection_form,
            "severity": severity,
            "applies_to": applies_to,
            "evidence": evidence,
        }
        changes = {name: value for name, value in given.items() if value is not UNSET}
        if "applies_to" in changes and not isinstance(changes["applies_to"], str):
            changes["applies_to"] = tuple(changes["applies_to"])
        with self._write() as session:
            current = _require(session, entity_id)
            updated = validate_record(replace(current, **changes, updated_at=self._clock()))
            _update(session, current, updated)
        return updated

    def activate(self, entity_id: str) -> LessonRecord:
        """Make a proposed or retired lesson active.

        Already active: nothing is written and ``updated_at`` stays. A superseded lesson stays
        superseded (``ValidationError("status")``): its replacement is the live one.
        """
        return self._set_status(entity_id, "active")

    def retire(self, entity_id: str) -> LessonRecord:
        """Retire a proposed or active lesson (kept, never matched).

        Already retired: nothing is written. A superseded lesson cannot be retired
        (``ValidationError("status")``).
        """
        return self._set_status(entity_id, "retired")

    def supersede(self, old_id: str, new_id: str) -> LessonRecord:
        """Mark ``old_id`` superseded by ``new_id`` and return the old lesson.

        ``old_id`` must be active (``ValidationError("status")``: a proposed lesson is retired
        instead, a superseded one is final). ``new_id`` must exist (``NotFoundError``) and must
        not be retired or superseded itself (``ValidationError("superseded_by")``); a proposed
        replacement is activated in the same transaction, so guidance never disappears between
        the two steps.
        """
        if old_id == new_id:
            raise ValidationError("superseded_by", "a lesson cannot supersede itself")
        now = self._clock()
        with self._write() as session:
            old = _require(session, old_id)
            new = _require(session, new_id, field="superseded_by")
            if new.status in ("retired", "superseded"):
                raise ValidationError(
                    "superseded_by", f"lesson {new_id!r} is {new.status} and cannot replace another"
                )
            check_transition(old_id, old.status, "superseded")
            if new.status == "proposed":
                _update(session, new, replace(new, status="active", updated_at=now))
            result = validate_record(
                replace(old, status="superseded", superseded_by=new_id, updated_at=now)
            )
            _update(session, old, result)
        return result

    def delete(self, entity_id: str) -> None:
        """Delete a lesson and its scope keys (its audit history stays).

        Refused (``ValidationError("entity_id")``) while other lessons are superseded by it.
        """
        with self._write() as session:
            _require(session, entity_id)
            referrers = list(
                session.scalars(
                    sa.select(LESSONS.c.entity_id)
                    .where(LESSONS.c.superseded_by == entity_id)
                    .order_by(LESSONS.c.entity_id)
                )
            )
            if referrers:
                raise ValidationError(
                    "entity_id",
                    f"lesson {entity_id!r} supersedes {', '.join(referrers)}; "
                    "delete or re-point those first",
                )
            # The scope keys go by the foreign key's cascade, so the audit shows one delete.
            session.execute(sa.delete(LESSONS).where(LESSONS.c.entity_id == entity_id))

    def import_jsonl(self, lines: Iterable[str]) -> ImportSummary:
        """Import JSON Lines (``read_jsonl``); all or nothing. See ``import_records``."""
        return self.import_records(list(read_jsonl(lines)))

    def import_records(self, records: Iterable[LessonRecord]) -> ImportSummary:
        """Insert or update lessons so they equal ``records``, in one transaction.

        Round-trips ``export_records`` exactly, timestamps included. A record identical to the
        stored lesson changes nothing (no write, no audit row, same ``updated_at``). A
        different ``created_at`` for an existing lesson is refused (it is immutable); a
        missing one keeps the stored value. The same entity_id twice in one import is
        refused, and so is a status change the lifecycle does not allow (``status``). Any
        refusal leaves the database untouched.
        """
        batch = [validate_record(record) for record in records]
        seen: set[str] = set()
        for record in batch:
            if record.entity_id in seen:
                raise ValidationError(
                    "entity_id", f"{record.entity_id!r} appears more than once in the import"
                )
            seen.add(record.entity_id)
        now = self._clock()
        added = updated = unchanged = 0
        with self._write() as session:
            stored = {r.entity_id: r for r in _fetch(session, [r.entity_id for r in batch])}
            inserts: Records = []
            updates: list[tuple[LessonRecord, LessonRecord]] = []
            for record in batch:
                current = stored.get(record.entity_id)
                if current is None:
                    inserts.append(_stamped(record, now))
                    continue
                wanted = _merged(current, record, now)
                check_transition(record.entity_id, current.status, wanted.status)
                if wanted == current:
                    unchanged += 1
                else:
                    updates.append((current, wanted))
            for record in _referents_first(inserts):
                _check_reference(session, record)
                _insert(session, record)
                added += 1
            for current, wanted in updates:
                _check_reference(session, wanted)
                _update(session, current, wanted)
                updated += 1
        return ImportSummary(added=added, updated=updated, unchanged=unchanged)

    def _set_status(self, entity_id: str, status: str) -> LessonRecord:
        with self._write() as session:
            current = _require(session, entity_id)
            if current.status == status:
                return current
            check_transition(entity_id, current.status, status)
            result = validate_record(
                replace(current, status=status, superseded_by=None, updated_at=self._clock())
            )
            _update(session, current, result)
        return result


# -- row mapping (module level: they take the session explicitly) -------------------------------


def _stamped(record: LessonRecord, now: datetime) -> LessonRecord:
    created = record.created_at or now
    return replace(record, created_at=created, updated_at=record.updated_at or created)


def _merged(current: LessonRecord, record: LessonRecord, now: datetime) -> LessonRecord:
    """What ``record`` asks the stored ``current`` to become (missing timestamps kept)."""
    if record.created_at is not None and record.created_at != current.created_at:
        raise ValidationError(
            "created_at",
            f"lesson {record.entity_id!r} was created at {current.created_at}; "
            "created_at is immutable",
        )
    wanted = replace(record, created_at=current.created_at, updated_at=current.updated_at)
    if wanted == current:
        return current
    return replace(wanted, updated_at=record.updated_at or now)


def _referents_first(records: Records) -> Records:
    """Order inserts so a lesson comes after the lesson it is superseded by."""
    pending = {r.entity_id: r for r in records}
    ordered: Records = []
    placing: set[str] = set()

    def place(record: LessonRecord) -> None:
        if record.entity_id not in pending:
            return
        if record.entity_id in placing:
            raise ValidationError(
                "superseded_by", f"lesson {record.entity_id!r} is in a supersede cycle"
            )
        placing.add(record.entity_id)
        target = pending.get(record.superseded_by or "")
        if target is not None:
            place(target)
        placing.discard(record.entity_id)
        ordered.append(pending.pop(record.entity_id))

    for record in records:
        place(record)
    return ordered


def _require(session: Session, entity_id: str, field: str = "entity_id") -> LessonRecord:
    validate_entity_id(entity_id, field)
    found = _fetch(session, [entity_id])
    if not found:
        raise NotFoundError(f"{field}: no lesson {entity_id!r}")
    return found[0]


def _check_reference(session: Session, record: LessonRecord) -> None:
    if record.superseded_by is not None and not _fetch(session, [record.superseded_by]):
        raise ValidationError("superseded_by", f"no lesson {record.superseded_by!r}")


def _fetch(session: Session, ids: Sequence[str]) -> Records:
    """The stored lessons among ``ids`` (absent ones skipped), ordered by entity_id.

    Looked up by primary key in chunks, so a long list never exceeds bind-parameter limits.
    """
    records: Records = []
    unique = sorted(set(ids))
    for start in range(0, len(unique), _CHUNK):
        query = sa.select(LESSONS).where(LESSONS.c.entity_id.in_(unique[start : start + _CHUNK]))
        records.extend(_load(session, query))
    return records


def _by_code_point(session: Session) -> sa.ColumnElement[str]:
    """entity_id ordered by code point, as the matcher orders ties (PostgreSQL: "C")."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        return LESSONS.c.entity_id.collate("C")
    return LESSONS.c.entity_id  # SQLite's BINARY collation already compares code points


def _load(session: Session, query: sa.Select[Any]) -> Records:
    """Records for the ``lessons`` rows ``query`` selects, ordered by entity_id (code point),
    each with its scope keys in their stored order."""
    rows = session.execute(query.order_by(_by_code_point(session))).all()
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
    return [
        LessonRecord(
            entity_id=row.entity_id,
            status=row.status,
            severity=row.severity,
            injection_form=row.injection_form,
            applies_to=tuple(keys[row.entity_id]),
            summary=row.summary,
            detail=row.detail,
            created_at=row.created_at,
            updated_at=row.updated_at,
            superseded_by=row.superseded_by,
            evidence=row.evidence,
        )
        for row in rows
    ]


# The candidate lookup: matching keys → active lessons, one statement on each dialect. Both
# pin the join order: ix_lesson_scopes_scope_key first, then each lesson by primary key —
# whatever the planner statistics say (none at all on a database never ANALYZEd, where
# ``status = 'active'`` looks selective and a free planner walks every active lesson, through
# ix_lessons_status or a scan). Both bind the keys as ONE parameter, so the statement text is
# the same for every scope and nothing is rendered per call.
# - PostgreSQL: a text[] parameter. The lesson is fetched in a LATERAL subquery that refers
#   to the key row; OFFSET 0 stops the planner from pulling it up into a free join (the
#   PostgreSQL developers' own idiom for this), so it runs once per matching key row. That
#   holds for a generic plan too, which psycopg may use once it prepares the statement (after
#   5 runs on a connection).
# - SQLite: a JSON array unpacked by json_each. SQLite never reorders a CROSS JOIN.
_CANDIDATES: Final = {
    "postgresql": sa.text(
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key "
        "FROM lesson_scopes k CROSS JOIN LATERAL ("
        "SELECT entity_id, severity, created_at, injection_form FROM lessons "
        "WHERE entity_id = k.lesson_id AND status = 'active' OFFSET 0) l "
        "WHERE k.scope_key = ANY(CAST(:keys AS text[]))"
    ),
    "sqlite": sa.text(
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key "
        "FROM lesson_scopes k CROSS JOIN lessons l "
        "WHERE k.scope_key IN (SELECT value FROM json_each(:keys)) "
        "AND l.entity_id = k.lesson_id AND l.status = 'active'"
    ),
}


def _select_candidates(connection: sa.Connection, keys: Sequence[str]) -> Sequence[sa.Row[Any]]:
    """Rows (entity_id, severity, created_at, injection_form, scope_key), one per matched key."""
    if connection.dialect.name == "postgresql":
        return connection.execute(_CANDIDATES["postgresql"], {"keys": list(keys)}).all()
    return connection.execute(_CANDIDATES["sqlite"], {"keys": json.dumps(list(keys))}).all()


def _candidate_lessons(rows: Iterable[Sequence[Any]]) -> Lessons:
    """``Lesson``s from ``_select_candidates`` rows: one per entity_id (code-point order), its
    matched keys sorted, so the result does not depend on the plan's row order."""
    found: dict[str, Sequence[Any]] = {}
    matched: dict[str, list[str]] = {}
    for row in rows:
        keys = matched.get(row[0])
        if keys is None:
            found[row[0]] = row
            matched[row[0]] = [row[4]]
        else:
            keys.append(row[4])
    lessons: Lessons = []
    for entity_id in sorted(found):
        _, severity, created_at, injection_form, _ = found[entity_id]
        lessons.append(
            Lesson(
                entity_id=entity_id,
                status="active",  # the statement selects active lessons only
                severity=severity,
                created_at=_rfc3339(created_at),
                applies_to=tuple(sorted(matched[entity_id])),
                injection_form=injection_form,
            )
        )
    return lessons


def _rfc3339(value: datetime | str) -> str:
    """A raw ``created_at`` rendered as ``LessonRecord.to_lesson()`` renders it.

    PostgreSQL hands back an aware ``datetime``. SQLite hands back the stored text, naive UTC,
    which is read as ``UTCDateTime`` reads it (``datetime.fromisoformat``, UTC attached when
    naive) — except the form ``UTCDateTime`` itself writes, ``YYYY-MM-DD HH:MM:SS.ffffff``,
    which is rewritten by slicing to the same string, several times faster.
    """
    if isinstance(value, datetime):
        return format_timestamp(value)
    if len(value) == 26 and value[10] == " " and value[19] == "." and value[20:].isdigit():
        return f"{value[:10]}T{value[11:]}+00:00"
    moment = datetime.fromisoformat(value)
    return format_timestamp(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


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


def _insert(session: Session, record: LessonRecord) -> None:
    session.execute(
        sa.insert(LESSONS).values(
            entity_id=record.entity_id, created_at=record.created_at, **_columns(record)
        )
    )
    _insert_keys(session, record)


def _insert_keys(session: Session, record: LessonRecord) -> None:
    if record.applies_to:
        session.execute(
            sa.insert(SCOPES),
            [
                {"lesson_id": record.entity_id, "scope_key": key, "position": position}
                for position, key in enumerate(record.applies_to)
            ],
        )


def _update(session: Session, current: LessonRecord, wanted: LessonRecord) -> None:
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
def _acting(session: Session, actor: str) -> Iterator[None]:
    """Name ``actor`` to the audit triggers for the writes inside the block.

    PostgreSQL: the transaction-local setting ``contextstore.actor``, emptied when the block
    ends (a caller's transaction may go on with writes of its own, which are not ours).
    SQLite: the one row of ``lesson_audit_actor``, removed again before the block ends; on a
    failure the rollback of the transaction (or savepoint) removes it.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            sa.text("SELECT set_config('contextstore.actor', :actor, true)"), {"actor": actor}
        )
        yield
        session.execute(sa.text("SELECT set_config('contextstore.actor', '', true)"))
        return
    session.execute(
        sa.text(f"INSERT OR REPLACE INTO {SQLITE_ACTOR_TABLE} (id, actor) VALUES (1, :actor)"),
        {"actor": actor},
    )
    yield
    session.execute(sa.text(f"DELETE FROM {SQLITE_ACTOR_TABLE}"))
