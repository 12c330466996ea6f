"""``LessonRepository``: lessons in SQL (docs/design/storage.md), one transaction per public method.

Session pattern: ``LessonRepository(engine)`` opens and commits its own transaction for every
public method, so ``store.lessons.add(record)`` just works. To make lesson writes part of a
larger unit of work, ``repository.using(session)`` returns a repository that runs inside the
caller's ``Session``: each write is wrapped in a SAVEPOINT (a refused write leaves the
caller's transaction usable), flushed, and committed only when the caller commits.

Every write validates first (``contextstore.core.lessons.validate_record``) and raises
``ValidationError`` naming the field before touching the database; constraint violations the
database still finds are translated the same way. A missing lesson raises ``NotFoundError``.
The audit rows in ``lesson_events`` are written by database triggers, not by this class; the
repository tells them its ``actor`` (default: the operating-system user) for every write
transaction: on PostgreSQL as the transaction setting ``contextstore.actor``, on SQLite as the
row of ``lesson_audit_actor``, written first and removed before the transaction commits (see
migration 0003). Status changes follow the lifecycle (``contextstore.core.lessons.TRANSITIONS``),
checked here first for a clear message and enforced by the database for everyone else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.sql import proposals as proposing
from contextstore.backends.sql.database import read_only, tolerating_bytes
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.errors import translate_errors
from contextstore.backends.sql.lessons import imports
from contextstore.backends.sql.lessons import queries as q
from contextstore.backends.sql.lessons.candidates import (
    candidate_lessons,
    candidates_statement,
    select_candidates,
)
from contextstore.backends.sql.lessons.imports import (
    ImportSummary,
    check_unique,
    paced,
    plan_import,
    referents_first,
    stamped,
)
from contextstore.backends.sql.lessons.queries import UNSET, LessonEvent, Unset
from contextstore.backends.sql.transactions import retry_conflicts, utc_now
from contextstore.backends.sql.unreadable import (
    UnreadableLesson,
    UnreadableRowError,
)
from contextstore.config import DEFAULT_NAMESPACE
from contextstore.core.lessons import (
    LessonRecord,
    check_transition,
    default_actor,
    read_jsonl,
    unrestorable,
    validate_actor,
    validate_record,
    validate_scope,
    write_jsonl,
)
from contextstore.core.matching import Lesson, Scope, lookup_keys
from contextstore.core.validation import storable_text
from contextstore.errors import NotFoundError, ValidationError

__all__ = ["UNSET", "ImportSummary", "LessonEvent", "LessonRepository"]

Clock = Callable[[], datetime]
R = TypeVar("R")
# Aliases, because inside LessonRepository the name ``list`` is the method.
Records = list[LessonRecord]
Lessons = list[Lesson]


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
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        """``actor`` names who writes, in the audit; ``None`` means the operating-system user.
        ``namespace`` is where ``propose`` counts its proposals (lessons themselves belong
        to the database, shared by every namespace).

        A blank, over-long (> 255 characters) or control-character actor is refused
        (``ValidationError("actor")``). ``sleep`` waits between an import's transactions and
        before a retry (the asyncio twin passes one that yields to the event loop).
        """
        self._engine = engine
        self._dialect = dialect_of(engine)
        self._sleep = sleep
        # The run's read, sent on the driver connection (``contextstore.backends.sql.direct``).
        self._direct: dict[bool, DirectStatement] = {}
        self._clock = clock
        self._session = session
        self._actor = default_actor() if actor is None else validate_actor(actor)
        self._namespace = namespace

    @property
    def actor(self) -> str:
        """Who this repository's writes are attributed to in ``lesson_events``."""
        return self._actor

    def using(self, session: Session) -> LessonRepository:
        """This repository joined to the caller's ``session`` (the caller commits)."""
        return LessonRepository(
            self._engine,
            clock=self._clock,
            session=session,
            actor=self._actor,
            sleep=self._sleep,
            namespace=self._namespace,
        )

    def as_actor(self, actor: str) -> LessonRepository:
        """This repository with its writes attributed to ``actor``."""
        return LessonRepository(
            self._engine,
            clock=self._clock,
            session=self._session,
            actor=actor,
            sleep=self._sleep,
            namespace=self._namespace,
        )

    # -- transactions -----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with translate_errors(self._engine.url):
            if self._session is not None:
                with self._session.begin_nested(), q.acting(self._session, self._actor):
                    yield self._session
                    self._session.flush()
                return
            with (
                Session(self._engine) as session,
                session.begin(),
                q.acting(session, self._actor),
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
        storable_text(entity_id, "entity_id")
        return self._reading(lambda session: q.require(session, entity_id))

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
        """Lessons ordered by entity_id, filtered by status and severity (either in any case;
        another value is refused, naming the allowed ones) and by exact scope key.

        ``tag="x"`` is shorthand for ``key="tag:x"``; giving both requires both. ``limit`` of
        ``None`` means all; ``offset`` (``None`` as 0) skips that many of the ordered, filtered
        lessons first (a page is ``offset=page * size, limit=size``). A negative limit or
        offset is refused.
        ``search`` keeps the lessons whose entity id, summary, detail or injection form
        contains it, ignoring case as the database's ``lower()`` does (ASCII letters on
        SQLite, all letters on PostgreSQL); ``%`` and ``_`` are plain characters. ``None`` or
        ``""`` keeps all.
        """
        query = q.list_query(
            status=status,
            severity=severity,
            key=key,
            tag=tag,
            limit=limit,
            offset=offset,
            search=search,
        )
        return self._reading(lambda session: q.load(session, query, skip=True))

    def export_records(self) -> Records:
        """Every lesson an import restores, ordered by entity_id. Left out, with a WARNING
        as for an unreadable row: those ``list`` skips, and a lesson whose ``superseded_by``
        names a lesson not exported or runs in a cycle (``contextstore db check`` lists all)."""
        records = self.list()
        left_out = unrestorable(records)
        for entity_id, reason in left_out.items():
            q.skipped(entity_id, UnreadableRowError("superseded_by", None, reason))
        return [record for record in records if record.entity_id not in left_out]

    def export_jsonl(self) -> Iterator[str]:
        """Every lesson as a JSON line (``write_jsonl``), ordered by entity_id."""
        return write_jsonl(self.export_records())

    def history(self, entity_id: str | None = None) -> Events:
        """Audit rows, oldest first; for one lesson (even a deleted one) or for all."""
        query = q.history_query(entity_id)
        return self._reading(lambda session: q.read_events(session, query))

    def check(self) -> Unreadables:
        """Lesson rows readers skip (a malformed timestamp or evidence typed in SQL, a value an
        import refuses) and those an export leaves out (``superseded_by`` naming no exported
        lesson, or a cycle), each with the column at fault, the stored value and the reason;
        ``[]`` when every row reads and restores."""
        return self._reading(q.check_rows)

    def events_count(self, event: str | None = None) -> int:
        """How many audit rows there are (of one ``event`` kind when given)."""
        query = sa.select(sa.func.count()).select_from(q.EVENTS)
        if event is not None:
            query = query.where(q.EVENTS.c.event == event)
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
        never scans ``lessons`` (see ``lessons.candidates``). Only the columns the matcher reads are
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
        keys = sorted(lookup_keys(validate_scope(scope)))
        if not keys:
            return []

        def select() -> Sequence[Sequence[Any]]:
            with translate_errors(self._engine.url):
                if self._session is not None:
                    return select_candidates(self._session.connection(), keys, include_inactive)
                statement, values = self.candidates_read(keys, include_inactive)
                return statement.rows(values)

        return candidate_lessons(tolerating_bytes(self._engine, select))

    def candidates_read(
        self, keys: Sequence[str], include_inactive: bool = False
    ) -> tuple[DirectStatement, dict[str, Any]]:
        """The statement ``candidates`` sends for ``keys`` (sorted lookup keys, at least one)
        and its values; its rows make lessons with ``candidate_lessons``."""
        values = {"keys": self._dialect.keys_parameter(keys)}
        return self._candidates_statement(include_inactive), values

    def _candidates_statement(self, include_inactive: bool) -> DirectStatement:
        statement = self._direct.get(include_inactive)
        if statement is None:
            text = candidates_statement(self._dialect, include_inactive)
            statement = DirectStatement(self._engine, text)
            self._direct[include_inactive] = statement
        return statement

    # -- writes -----------------------------------------------------------------------------

    def add(self, record: LessonRecord) -> LessonRecord:
        """Insert a new lesson and return it as stored.

        ``created_at`` defaults to now (UTC) and an explicit one is kept; ``updated_at``
        defaults to ``created_at``. An existing entity_id is refused (``entity_id``); a
        ``superseded_by`` naming no lesson is refused (``superseded_by``).
        """
        record = stamped(validate_record(record), self._clock())
        with self._write() as session:
            if q.fetch(session, [record.entity_id]):
                raise ValidationError("entity_id", f"lesson {record.entity_id!r} already exists")
            q.check_reference(session, record)
            q.insert(session, record)
        return record

    def update(
        self,
        entity_id: str,
        *,
        summary: str | Unset = UNSET,
        detail: str | Unset = UNSET,
        injection_form: str | Unset = UNSET,
        severity: str | Unset = UNSET,
        applies_to: Sequence[str] | Unset = UNSET,
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
        storable_text(entity_id, "entity_id")
        changes = {name: value for name, value in given.items() if value is not UNSET}
        if "applies_to" in changes and not isinstance(changes["applies_to"], str):
            changes["applies_to"] = tuple(changes["applies_to"])
        with self._write() as session:
            current = q.require(session, entity_id)
            updated = validate_record(replace(current, **changes, updated_at=self._clock()))
            q.update(session, current, updated)
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
        storable_text(old_id, "entity_id")
        storable_text(new_id, "superseded_by")
        if old_id == new_id:
            raise ValidationError("superseded_by", "a lesson cannot supersede itself")
        now = self._clock()
        with self._write() as session:
            old = q.require(session, old_id)
            new = q.require(session, new_id, field="superseded_by")
            if new.status in ("retired", "superseded"):
                raise ValidationError(
                    "superseded_by", f"lesson {new_id!r} is {new.status} and cannot replace another"
                )
            check_transition(old_id, old.status, "superseded")
            if new.status == "proposed":
                q.update(session, new, replace(new, status="active", updated_at=now))
            result = validate_record(
                replace(old, status="superseded", superseded_by=new_id, updated_at=now)
            )
            q.update(session, old, result)
        return result

    def delete(self, entity_id: str, *, missing_ok: bool = False) -> bool:
        """Delete a lesson and its scope keys (its audit history stays); ``True`` once
        deleted. No such lesson: ``NotFoundError``, or ``False`` with ``missing_ok``.

        Refused (``ValidationError("entity_id")``) while other lessons are superseded by it.
        """
        storable_text(entity_id, "entity_id")
        with self._write() as session:
            try:
                q.require(session, entity_id)
            except NotFoundError:
                if missing_ok:
                    return False
                raise
            referrers = list(
                session.scalars(
                    sa.select(q.LESSONS.c.entity_id)
                    .where(q.LESSONS.c.superseded_by == entity_id)
                    .order_by(q.LESSONS.c.entity_id)
                )
            )
            if referrers:
                raise ValidationError(
                    "entity_id",
                    f"lesson {entity_id!r} supersedes {', '.join(referrers)}; "
                    "delete or re-point those first",
                )
            # The scope keys go by the foreign key's cascade, so the audit shows one delete.
            session.execute(sa.delete(q.LESSONS).where(q.LESSONS.c.entity_id == entity_id))
        return True

    # -- proposals (contextstore.backends.sql.proposals) ------------------------------------

    def propose(self, record: LessonRecord, *, namespace: str | None = None) -> LessonRecord:
        """Add ``record`` as a lesson proposed by this repository's actor from ``namespace``
        (default: the repository's); it is never matched until activated.

        Refused, with nothing written: a status other than ``proposed`` (``status``),
        evidence naming neither the run nor the query that taught it (``evidence``), the
        same injection form and scope keys as a stored lesson (``injection_form``, naming
        it), a known entity id (``entity_id``); past the namespace's cap, ``RateLimitedError``.
        """
        record = stamped(proposing.check_proposal(validate_record(record)), self._clock())
        with self._write() as session:
            if q.fetch(session, [record.entity_id]):
                raise ValidationError("entity_id", f"lesson {record.entity_id!r} already exists")
            proposing.admit(
                session,
                record,
                namespace=self._namespace if namespace is None else namespace,
                proposer=self._actor,
                now=record.created_at or self._clock(),
            )
            q.insert(session, record)
        return record

    def accept(self, entity_id: str, **changes: Any) -> LessonRecord:
        """Activate a proposed lesson, first changing the content fields given (as
        ``update`` takes them), in one transaction; the review names this actor."""
        return self._review(entity_id, "active", None, changes)

    def reject(self, entity_id: str, reason: str) -> LessonRecord:
        """Retire a proposed lesson, recording who rejected it and ``reason``."""
        return self._review(entity_id, "retired", proposing.check_reason(reason), {})

    def _review(
        self, entity_id: str, status: str, reason: str | None, changes: dict[str, Any]
    ) -> LessonRecord:
        storable_text(entity_id, "entity_id")
        content = {"summary", "detail", "injection_form", "severity", "applies_to"}
        unknown = sorted(set(changes) - content)
        if unknown:
            raise ValidationError(unknown[0], "is not a content field of a lesson")
        if "applies_to" in changes:
            changes["applies_to"] = tuple(changes["applies_to"])
        now = self._clock()
        with self._write() as session:
            current = q.require(session, entity_id)
            if current.status != "proposed":
                raise ValidationError(
                    "status", f"lesson {entity_id!r} is {current.status}, not proposed"
                )
            wanted = validate_record(replace(current, **changes, status=status, updated_at=now))
            q.update(session, current, wanted)
            proposing.record_review(session, entity_id, self._actor, now, reason)
        return wanted

    def proposals(self, entity_ids: Sequence[str]) -> dict[str, proposing.Proposal]:
        """Who proposed each of ``entity_ids``, from where and when, and its review (lessons
        never proposed are absent)."""
        ids = [storable_text(entity_id, "entity_id") for entity_id in entity_ids]
        return self._reading(lambda session: proposing.proposals_of(session, ids))

    def proposal_limit(self, namespace: str | None = None) -> int | None:
        """The namespace's cap on proposals per hour; ``None``: no cap."""
        chosen = self._namespace if namespace is None else namespace
        return self._reading(lambda session: proposing.limit_of(session, chosen))

    def set_proposal_limit(self, per_hour: int | None, namespace: str | None = None) -> None:
        """Cap the namespace's proposals at ``per_hour`` in any hour (``None``: no cap)."""
        checked = proposing.check_per_hour(per_hour)
        chosen = self._namespace if namespace is None else namespace
        with self._write() as session:
            proposing.set_limit(session, chosen, checked)

    def import_jsonl(self, lines: Iterable[str | bytes]) -> ImportSummary:
        """Import JSON Lines (``read_jsonl``: a file or lines, each at most
        ``MAX_LINE_BYTES``); all or nothing. See ``import_records``."""
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
          deadlock) retries the whole import, up to ``CONFLICT_ATTEMPTS`` times, so concurrent
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
        seen = check_unique(batch)
        now = self._clock()
        ordered = referents_first(batch)
        if self._session is not None:
            return self._import_chunk(ordered, now)
        if not self._dialect.chunks_imports or len(ordered) <= imports.IMPORT_CHUNK:
            return retry_conflicts(
                self._engine, lambda: self._import_chunk(ordered, now), self._sleep
            )
        with self._read() as session:
            plan_import(session, ordered, now, known=seen)  # refusals before any write
        return paced(
            ordered,
            lambda chunk: self._import_chunk(chunk, now),
            self._sleep,
            self._checkpoint,
        )

    def _import_chunk(self, chunk: Records, now: datetime) -> ImportSummary:
        with self._write() as session:
            inserts, updates, unchanged = plan_import(session, chunk, now)
            q.insert_many(session, inserts)
            for current, wanted in updates:
                q.update(session, current, wanted)
        return ImportSummary(added=len(inserts), updated=len(updates), unchanged=unchanged)

    def _checkpoint(self) -> None:
        """Copy the WAL into the SQLite file now, in the importer's time: otherwise the commit
        that crosses SQLite's auto-checkpoint threshold, often an agent's metrics row, pays
        for copying everything the import wrote."""
        with translate_errors(self._engine.url):
            self._dialect.checkpoint(self._engine)

    def _set_status(self, entity_id: str, status: str) -> LessonRecord:
        storable_text(entity_id, "entity_id")
        with self._write() as session:
            current = q.require(session, entity_id)
            if current.status == status:
                return current
            check_transition(entity_id, current.status, status)
            result = validate_record(
                replace(current, status=status, superseded_by=None, updated_at=self._clock())
            )
            q.update(session, current, result)
        return result
