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
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.errors import BackendUnavailableError, NotFoundError, ValidationError
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
from contextstore.sql.database import read_only, tolerating_bytes, translate_errors
from contextstore.sql.direct import DirectStatement
from contextstore.sql.models import SQLITE_ACTOR_TABLE, LessonEventRow, LessonRow, LessonScopeRow
from contextstore.sql.unreadable import (
    SKIP_WARNINGS,
    UnreadableLesson,
    UnreadableRowError,
    check_text,
    escaped,
    printable,
    raw_text,
    read_evidence,
    read_timestamp,
    safe_timestamp,
)

Clock = Callable[[], datetime]
R = TypeVar("R")
# Aliases, because inside LessonRepository the name ``list`` is the method.
Records = list[LessonRecord]
Lessons = list[Lesson]

LESSONS: Final = cast(sa.Table, LessonRow.__table__)
SCOPES: Final = cast(sa.Table, LessonScopeRow.__table__)
EVENTS: Final = cast(sa.Table, LessonEventRow.__table__)
MAX_SEARCH_CHARS: Final = 200

# Scope keys are fetched for this many lessons per query (bind-parameter limits).
_CHUNK = 500
# A large SQLite import writes in transactions sized to hold the write lock about
# IMPORT_TARGET_S each (starting at IMPORT_CHUNK records, then resized from the time the last
# one took), pausing in between for longer than SQLite's busy handler sleeps (100 ms at
# most), so a waiting writer always gets the lock within about one chunk's time. A chunk
# shrinks at once when the last one was slow but grows at most twofold, and never past the
# upper limit: on a loaded machine the next chunk can run far slower than the last did.
IMPORT_CHUNK: Final = 200
IMPORT_CHUNK_LIMITS: Final = (20, 500)
IMPORT_TARGET_S: Final = 0.03
IMPORT_PAUSE_S: Final = 0.12
# Whole-import attempts on PostgreSQL when a concurrent writer conflicts.
IMPORT_ATTEMPTS: Final = 8


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
Unreadables = list[UnreadableLesson]


class LessonRepository:
    """Lessons in SQL; implements ``LessonSource`` (``candidates``) for the engine."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: Clock = utc_now,
        session: Session | None = None,
        actor: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``actor`` names who writes, in the audit; ``None`` means the operating-system user.

        A blank, over-long (> 255 characters) or control-character actor is refused
        (``ValidationError("actor")``). ``sleep`` waits between an import's transactions and
        before a retry (the asyncio twin passes one that yields to the event loop).
        """
        self._engine = engine
        self._sleep = sleep
        # The run's read, sent on the driver connection (``contextstore.sql.direct``).
        self._direct: dict[bool, DirectStatement] = {}
        self._clock = clock
        self._session = session
        self._actor = default_actor() if actor is None else validate_actor(actor)

    @property
    def actor(self) -> str:
        """Who this repository's writes are attributed to in ``lesson_events``."""
        return self._actor

    def using(self, session: Session) -> LessonRepository:
        """This repository joined to the caller's ``session`` (the caller commits)."""
        return LessonRepository(
            self._engine, clock=self._clock, session=session, actor=self._actor, sleep=self._sleep
        )

    def as_actor(self, actor: str) -> LessonRepository:
        """This repository with its writes attributed to ``actor``."""
        return LessonRepository(
            self._engine, clock=self._clock, session=self._session, actor=actor, sleep=self._sleep
        )

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

    def _reading(self, work: Callable[[Session], R]) -> R:
        """``work(session)`` in a read transaction, again with lenient text decoding if SQLite
        holds bytes that are not UTF-8 (``tolerating_bytes``)."""

        def attempt() -> R:
            with self._read() as session:
                return work(session)

        return tolerating_bytes(self._engine, attempt)

    # -- reads ------------------------------------------------------------------------------

    def get(self, entity_id: str) -> LessonRecord:
        """The lesson ``entity_id``; ``NotFoundError`` when there is none."""
        return self._reading(lambda session: _require(session, entity_id))

    def list(
        self,
        *,
        status: str | None = None,
        severity: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
        offset: int | None = 0,
        search: str | None = None,
    ) -> Records:
        """Lessons ordered by entity_id, filtered by exact status, severity and scope key.

        ``tag="x"`` is shorthand for ``key="tag:x"``; giving both requires both. ``limit`` of
        ``None`` means all; ``offset`` (``None`` as 0) skips that many of the ordered, filtered
        lessons first (a page is ``offset=page * size, limit=size``). A negative limit or
        offset is refused.
        ``search`` keeps the lessons whose entity id, summary, detail or injection form
        contains it, ignoring case as the database's ``lower()`` does (ASCII letters on
        SQLite, all letters on PostgreSQL); ``%`` and ``_`` are plain characters. ``None`` or
        ``""`` keeps all.
        """
        if status is not None and status not in STATUSES:
            raise ValidationError("status", f"{status!r} is not one of {', '.join(STATUSES)}")
        if severity is not None and severity not in SEVERITIES:
            raise ValidationError("severity", f"{severity!r} is not one of {', '.join(SEVERITIES)}")
        keys = [validate_scope_key(k) for k in (key, None if tag is None else f"tag:{tag}") if k]
        if limit is not None and limit < 0:
            raise ValidationError("limit", f"must be zero or more, not {limit}")
        if search is not None and (
            not isinstance(search, str) or "\x00" in search or len(search) > MAX_SEARCH_CHARS
        ):
            raise ValidationError(
                "search", f"must be text without NUL, at most {MAX_SEARCH_CHARS} characters"
            )
        offset = 0 if offset is None else offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("offset", f"must be zero or more, not {offset!r}")
        query = sa.select(LESSONS).limit(limit).offset(offset or None)
        if status is not None:
            query = query.where(LESSONS.c.status == status)
        if severity is not None:
            query = query.where(LESSONS.c.severity == severity)
        if search:
            # lower() on both sides, so the database folds case the same way for both.
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = sa.func.lower(sa.literal(f"%{escaped}%", sa.Text()))
            query = query.where(
                sa.or_(
                    *(
                        sa.func.lower(column).like(pattern, escape="\\")
                        for column in (
                            LESSONS.c.entity_id,
                            LESSONS.c.summary,
                            LESSONS.c.detail,
                            LESSONS.c.injection_form,
                        )
                    )
                )
            )
        for scope_key in keys:
            query = query.where(
                LESSONS.c.entity_id.in_(
                    sa.select(SCOPES.c.lesson_id).where(SCOPES.c.scope_key == scope_key)
                )
            )
        return self._reading(lambda session: _load(session, query, skip=True))

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
        # An audit row keeps the old and new values as they were stored, bytes that are not
        # UTF-8 included (typed into SQLite by hand): shown escaped, never dropped.
        return self._reading(
            lambda session: [
                LessonEvent(**{name: escaped(value) for name, value in row._mapping.items()})
                for row in session.execute(query)
            ]
        )

    def check(self) -> Unreadables:
        """Lesson rows readers skip (a malformed timestamp or evidence typed in SQL), each with
        the column at fault, the stored value and the reason; ``[]`` when every row reads."""
        return self._reading(_check_rows)

    def events_count(self, event: str | None = None) -> int:
        """How many audit rows there are (of one ``event`` kind when given)."""
        query = sa.select(sa.func.count()).select_from(EVENTS)
        if event is not None:
            query = query.where(EVENTS.c.event == event)
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    def candidates(self, scope: Scope, *, include_inactive: bool = False) -> Lessons:
        """Active lessons sharing a key with ``lookup_keys(scope)``, ordered by entity_id.

        ``include_inactive=True`` returns the lessons of every status sharing such a key
        (proposed, retired and superseded too, each ``Lesson`` carrying its own ``status``):
        what ``explain`` needs to show why a lesson of the scope is left out. ``match`` over
        them gives the same result as over the active ones alone, as it accepts only
        ``status == "active"``. Still one statement, through the same index.

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

        def select() -> Sequence[Sequence[Any]]:
            with translate_errors(self._engine.url):
                if self._session is not None:
                    return _select_candidates(self._session.connection(), keys, include_inactive)
                statement, values = self.candidates_read(keys, include_inactive)
                return statement.rows(values)

        return candidate_lessons(tolerating_bytes(self._engine, select))

    def candidates_read(
        self, keys: Sequence[str], include_inactive: bool = False
    ) -> tuple[DirectStatement, dict[str, Any]]:
        """The statement ``candidates`` sends for ``keys`` (sorted lookup keys, at least one)
        and its values; its rows make lessons with ``candidate_lessons``."""
        values = {"keys": keys_parameter(self._engine.dialect.name, keys)}
        return self._candidates_statement(include_inactive), values

    def _candidates_statement(self, include_inactive: bool) -> DirectStatement:
        statement = self._direct.get(include_inactive)
        if statement is None:
            statements = _CANDIDATES_ANY_STATUS if include_inactive else _CANDIDATES
            statement = DirectStatement(self._engine, statements[self._engine.dialect.name])
            self._direct[include_inactive] = statement
        return statement

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
        """Insert or update lessons so they equal ``records``.

        Round-trips ``export_records`` exactly, timestamps included. A record identical to the
        stored lesson changes nothing (no write, no audit row, same ``updated_at``). A
        different ``created_at`` for an existing lesson is refused (it is immutable); a
        missing one keeps the stored value. The same entity_id twice in one import is
        refused, and so is a status change the lifecycle does not allow (``status``).

        Every record is validated, and checked against the stored lessons, before anything is
        written: a refusal leaves the database untouched. Then:

        - PostgreSQL (and inside ``using(session)``): one transaction, all or nothing. A
          conflict with a concurrent writer (a unique key, a serialization failure, a
          deadlock) retries the whole import, up to ``IMPORT_ATTEMPTS`` times, so concurrent
          imports of overlapping files all succeed and end as one import would.
        - SQLite, more than ``IMPORT_CHUNK`` records: short transactions (each sized to take
          about ``IMPORT_TARGET_S``) with a pause of ``IMPORT_PAUSE_S`` between them, so a long
          import never holds SQLite's single write lock for long and every agent's ``run()``
          gets its turn.
          If a write still fails midway (a concurrent writer changed a lesson in between),
          the chunks before it stay committed and the rest is not written; re-running the
          same import finishes it (what is already there is left unchanged).
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
        ordered = _referents_first(batch)
        chunked = (
            self._session is None
            and self._engine.dialect.name == "sqlite"
            and len(ordered) > IMPORT_CHUNK
        )
        if not chunked:
            return self._retrying(lambda: self._import_chunk(ordered, now))
        with self._read() as session:
            _plan_import(session, ordered, now, known=seen)  # refusals before any write
        total = ImportSummary()
        start, size = 0, IMPORT_CHUNK
        while start < len(ordered):
            if start:
                self._sleep(IMPORT_PAUSE_S)
            chunk = ordered[start : start + size]
            began = time.monotonic()
            done = self._import_chunk(chunk, now)
            elapsed = max(time.monotonic() - began, 0.001)
            _checkpoint(self._engine)
            start += len(chunk)
            low, high = IMPORT_CHUNK_LIMITS
            wanted = int(len(chunk) * IMPORT_TARGET_S / elapsed)
            size = max(low, min(high, 2 * len(chunk), wanted))
            total = ImportSummary(
                added=total.added + done.added,
                updated=total.updated + done.updated,
                unchanged=total.unchanged + done.unchanged,
            )
        return total

    def _import_chunk(self, chunk: Records, now: datetime) -> ImportSummary:
        with self._write() as session:
            inserts, updates, unchanged = _plan_import(session, chunk, now)
            _insert_many(session, inserts)
            for current, wanted in updates:
                _update(session, current, wanted)
        return ImportSummary(added=len(inserts), updated=len(updates), unchanged=unchanged)

    def _retrying(self, attempt: Callable[[], ImportSummary]) -> ImportSummary:
        """``attempt()``, again after a conflict with a concurrent writer (own transaction
        only: inside a caller's session the caller decides)."""
        for number in range(1, IMPORT_ATTEMPTS + 1):
            try:
                return attempt()
            except (ValidationError, BackendUnavailableError) as error:
                if self._session is not None or number == IMPORT_ATTEMPTS:
                    raise
                if not _is_conflict(error):
                    raise
                self._sleep(0.02 * number)
        raise AssertionError("unreachable")  # pragma: no cover

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


def _checkpoint(engine: sa.Engine) -> None:
    """Copy the WAL into the SQLite file now, in the importer's time: otherwise the commit
    that crosses SQLite's auto-checkpoint threshold, often an agent's metrics row, pays
    for copying everything the import wrote. PASSIVE: never waits for readers or writers."""
    with translate_errors(engine.url):
        connection = engine.raw_connection()  # autocommit: a checkpoint runs outside a BEGIN
        try:
            connection.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            connection.close()


def _plan_import(
    session: Session, batch: Records, now: datetime, known: set[str] | None = None
) -> tuple[Records, list[tuple[LessonRecord, LessonRecord]], int]:
    """What importing ``batch`` (referents first) writes: inserts, updates, unchanged count.

    Raises ``ValidationError`` for anything the import must refuse: a changed ``created_at``,
    a lifecycle violation, a ``superseded_by`` naming a lesson that is neither stored nor in
    ``known`` (ids arriving in the same import; ``None``: only earlier records of ``batch``).
    """
    stored = {r.entity_id: r for r in _fetch(session, [r.entity_id for r in batch])}
    referents = {r.superseded_by for r in batch if r.superseded_by is not None}
    present = {r.entity_id for r in _fetch(session, sorted(referents - set(stored)))}
    present |= set(stored) | (known or set())
    inserts: Records = []
    updates: list[tuple[LessonRecord, LessonRecord]] = []
    unchanged = 0
    for record in batch:
        if record.superseded_by is not None and record.superseded_by not in present:
            raise ValidationError("superseded_by", f"no lesson {record.superseded_by!r}")
        present.add(record.entity_id)
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
    return inserts, updates, unchanged


# SQLSTATEs of a conflict with a concurrent transaction: unique violation, serialization
# failure, deadlock. Retrying sees the other transaction's committed rows.
_CONFLICTS: Final = ("23505", "40001", "40P01")


def _is_conflict(error: BaseException) -> bool:
    cause = error.__cause__
    orig = getattr(cause, "orig", None)
    return getattr(orig, "sqlstate", None) in _CONFLICTS


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


def _lesson_columns(dialect: str) -> list[sa.ColumnElement[Any]]:
    """The ``lessons`` columns, timestamps and evidence in a form the driver cannot fail on."""
    c = LESSONS.c
    evidence = c.evidence if dialect == "postgresql" else sa.type_coerce(c.evidence, sa.String())
    return [
        c.entity_id,
        c.status,
        c.severity,
        c.injection_form,
        c.summary,
        c.detail,
        c.superseded_by,
        safe_timestamp(c.created_at, dialect).label("created_at"),
        safe_timestamp(c.updated_at, dialect).label("updated_at"),
        raw_text(c.created_at).label("created_at_raw"),
        raw_text(c.updated_at).label("updated_at_raw"),
        evidence.label("evidence"),
    ]


def _decode(row: sa.Row[Any], dialect: str, keys: tuple[str, ...]) -> LessonRecord:
    """One row as a record; ``UnreadableRowError`` when a column cannot be read."""
    for key in keys:
        check_text("applies_to", key)
    return LessonRecord(
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
        evidence=read_evidence(row.evidence, dialect),
    )


def _load(session: Session, query: sa.Select[Any], *, skip: bool = False) -> Records:
    """Records for the ``lessons`` rows ``query`` selects, ordered by entity_id (code point),
    each with its scope keys in their stored order.

    A row that cannot be read is skipped with a rate-limited WARNING when ``skip`` is set
    (listing, exporting); otherwise it raises ``ValidationError`` naming the column (a lesson
    asked for by id, or about to be written).
    """
    dialect = session.get_bind().dialect.name
    query = query.with_only_columns(*_lesson_columns(dialect))
    rows = session.execute(query.order_by(_by_code_point(session))).all()
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
            records.append(_decode(row, dialect, tuple(keys[row.entity_id])))
        except UnreadableRowError as error:
            _unreadable(row.entity_id, error, skip)
    return records


def _unreadable(entity_id: str, error: UnreadableRowError, skip: bool) -> None:
    """A rate-limited WARNING when ``skip``, else ``ValidationError`` naming the column."""
    if not skip:
        raise ValidationError(
            error.column,
            f"lesson {printable(entity_id)!r} is stored with an unreadable {error}; "
            "fix the row in SQL (contextstore db check lists such rows)",
        ) from error
    SKIP_WARNINGS.skipped(printable(entity_id), error)


def _check_rows(session: Session) -> list[UnreadableLesson]:
    """Every lesson row a reader would skip, ordered by entity_id."""
    dialect = session.get_bind().dialect.name
    query = sa.select(*_lesson_columns(dialect)).order_by(_by_code_point(session))
    keys: dict[str, list[str]] = {}
    for lesson_id, scope_key in session.execute(sa.select(SCOPES.c.lesson_id, SCOPES.c.scope_key)):
        keys.setdefault(lesson_id, []).append(scope_key)
    found: list[UnreadableLesson] = []
    for row in session.execute(query):
        try:
            _decode(row, dialect, tuple(keys.get(row.entity_id, ())))
        except UnreadableRowError as error:
            value = error.value if isinstance(error.value, str) else json.dumps(error.value)
            entity_id = printable(row.entity_id)
            found.append(UnreadableLesson(entity_id, error.column, value, error.reason))
    return found


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
_CANDIDATE_SQL: Final = {
    "postgresql": (
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary"
        "{extra} FROM lesson_scopes k CROSS JOIN LATERAL ("
        "SELECT entity_id, severity, injection_form, summary, CASE WHEN isfinite(created_at) "
        "AND created_at >= '0001-01-02 00:00:00+00' AND created_at < '9999-12-30 00:00:00+00' "
        "THEN created_at END AS created_at FROM lessons "
        "WHERE entity_id = k.lesson_id AND status = 'active' OFFSET 0) l "
        "WHERE k.scope_key = ANY(CAST(:keys AS text[]))"
    ),
    "sqlite": (
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary"
        "{extra} FROM lesson_scopes k CROSS JOIN lessons l "
        "WHERE k.scope_key IN (SELECT value FROM json_each(:keys)) "
        "AND l.entity_id = k.lesson_id AND l.status = 'active'"
    ),
}
# The same lookup for lessons of every status (``include_inactive``): the same join order,
# no status predicate, and the status as a seventh column.
_CANDIDATES_ANY_STATUS: Final = {
    "postgresql": sa.text(
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary, "
        "l.status FROM lesson_scopes k CROSS JOIN LATERAL ("
        "SELECT entity_id, severity, injection_form, summary, status, CASE WHEN "
        "isfinite(created_at) AND created_at >= '0001-01-02 00:00:00+00' "
        "AND created_at < '9999-12-30 00:00:00+00' THEN created_at END AS created_at "
        "FROM lessons WHERE entity_id = k.lesson_id OFFSET 0) l "
        "WHERE k.scope_key = ANY(CAST(:keys AS text[]))"
    ),
    "sqlite": sa.text(
        "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary, "
        "l.status FROM lesson_scopes k CROSS JOIN lessons l "
        "WHERE k.scope_key IN (SELECT value FROM json_each(:keys)) "
        "AND l.entity_id = k.lesson_id"
    ),
}


def candidate_sql(dialect: str, extra: str = "") -> str:
    """The candidate lookup's SQL text; ``extra`` (``", <expression>"``) adds a column."""
    return _CANDIDATE_SQL[dialect].format(extra=extra)


_CANDIDATES: Final = {dialect: sa.text(candidate_sql(dialect)) for dialect in _CANDIDATE_SQL}


def keys_parameter(dialect: str, keys: Sequence[str]) -> list[str] | str:
    """The ``:keys`` value of ``candidate_sql``: a text[] on PostgreSQL, JSON on SQLite."""
    return list(keys) if dialect == "postgresql" else json.dumps(list(keys))


def _select_candidates(
    connection: sa.Connection, keys: Sequence[str], include_inactive: bool = False
) -> Sequence[sa.Row[Any]]:
    """Rows (entity_id, severity, created_at, injection_form, scope_key, summary), one per
    matched key; with ``include_inactive``, lessons of any status and their status last."""
    statements = _CANDIDATES_ANY_STATUS if include_inactive else _CANDIDATES
    dialect = connection.dialect.name
    return connection.execute(statements[dialect], {"keys": keys_parameter(dialect, keys)}).all()


def candidate_lessons(rows: Iterable[Sequence[Any]]) -> Lessons:
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
        row = found[entity_id]
        _, severity, created_at, injection_form, _, summary = row[:6]
        # The default statement selects active lessons only and leaves the status out.
        status = row[6] if len(row) > 6 else "active"
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
                SKIP_WARNINGS.skipped(printable(entity_id), error)
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


def _insert_many(session: Session, records: Records) -> None:
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
