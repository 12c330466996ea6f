"""``AsyncLessonRepository``: ``LessonRepository`` awaited on an event loop
(``backends.sql.bridge``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.bridge import Bridge, CandidateReads, Ready, async_sleep
from contextstore.backends.sql.lessons.candidates import candidate_lessons
from contextstore.backends.sql.lessons.imports import ImportSummary
from contextstore.backends.sql.lessons.repository import LessonEvent, LessonRepository
from contextstore.backends.sql.proposals import Proposal
from contextstore.backends.sql.unreadable import UnreadableLesson
from contextstore.config import DEFAULT_NAMESPACE
from contextstore.core.lessons import LessonRecord, validate_scope
from contextstore.core.matching import Lesson, Scope, lookup_keys

__all__ = ["AsyncLessonRepository"]

Records = list[LessonRecord]
Events = list[LessonEvent]
Unreadables = list[UnreadableLesson]
Proposals = dict[str, Proposal]


class AsyncLessonRepository(Bridge[LessonRepository]):
    """``LessonRepository`` awaited: the same methods, arguments, results and errors.

    ``ready`` (optional) is awaited before each call (the store migrates there on first
    use). With ``pool`` (PostgreSQL), ``candidates`` of the active lessons is read on the
    driver directly, the reads of concurrent calls as one statement. Implements the async
    lesson source the ``AsyncContextEngine`` reads.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        ready: Ready | None = None,
        pool: DriverPool | None = None,
        clock: Callable[[], datetime] | None = None,
        actor: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        """``clock``, ``actor`` and ``namespace`` as ``LessonRepository`` takes them; an
        import's pauses between transactions and its retries wait with ``asyncio.sleep``."""
        options: dict[str, Any] = {"actor": actor, "namespace": namespace}
        if clock is not None:
            options["clock"] = clock
        target = LessonRepository(engine.sync_engine, sleep=async_sleep, **options)
        super().__init__(target, ready)
        self._reads: CandidateReads | None = None
        if pool is not None:
            self._reads = CandidateReads(pool, target.candidates_read, engine.sync_engine.url)

    @property
    def actor(self) -> str:
        """Who this repository's writes are attributed to in ``lesson_events``."""
        return self._target.actor

    async def using(self, session: Session) -> LessonRepository:
        """The sync repository joined to the caller's ``session`` (``LessonRepository.using``)."""
        return await self._run(self._target.using, session)

    async def as_actor(self, actor: str) -> LessonRepository:
        """The sync repository with its writes attributed to ``actor``."""
        return await self._run(self._target.as_actor, actor)

    async def candidates(self, scope: Scope, *, include_inactive: bool = False) -> list[Lesson]:
        """``LessonRepository.candidates``; with ``pool`` (PostgreSQL), the active lessons
        are read on the driver directly, concurrent reads as one statement."""
        keys = sorted(lookup_keys(validate_scope(scope)))
        if self._reads is None or include_inactive or not keys:
            return await self._run(
                self._target.candidates, scope, include_inactive=include_inactive
            )
        if self._ready is not None:
            await self._ready()
        return candidate_lessons(await self._reads.rows(keys))

    async def get(self, entity_id: str) -> LessonRecord:
        return await self._run(self._target.get, entity_id)

    async def list(
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
        return await self._run(
            self._target.list,
            status=status,
            severity=severity,
            key=key,
            tag=tag,
            limit=limit,
            offset=offset,
            search=search,
        )

    async def export_records(self) -> Records:
        return await self._run(self._target.export_records)

    async def export_jsonl(self) -> Iterator[str]:
        return await self._run(self._target.export_jsonl)

    async def history(self, entity_id: str | None = None) -> Events:
        return await self._run(self._target.history, entity_id)

    async def check(self) -> Unreadables:
        return await self._run(self._target.check)

    async def events_count(self, event: str | None = None) -> int:
        return await self._run(self._target.events_count, event)

    async def add(self, record: LessonRecord) -> LessonRecord:
        return await self._run(self._target.add, record)

    async def update(self, entity_id: str, **changes: Any) -> LessonRecord:
        return await self._run(self._target.update, entity_id, **changes)

    async def activate(self, entity_id: str) -> LessonRecord:
        return await self._run(self._target.activate, entity_id)

    async def retire(self, entity_id: str) -> LessonRecord:
        return await self._run(self._target.retire, entity_id)

    async def supersede(self, old_id: str, new_id: str) -> LessonRecord:
        return await self._run(self._target.supersede, old_id, new_id)

    async def delete(self, entity_id: str, *, missing_ok: bool = False) -> bool:
        return await self._run(self._target.delete, entity_id, missing_ok=missing_ok)

    async def propose(self, record: LessonRecord, *, namespace: str | None = None) -> LessonRecord:
        return await self._run(self._target.propose, record, namespace=namespace)

    async def accept(self, entity_id: str, **changes: Any) -> LessonRecord:
        return await self._run(self._target.accept, entity_id, **changes)

    async def reject(self, entity_id: str, reason: str) -> LessonRecord:
        return await self._run(self._target.reject, entity_id, reason)

    async def proposals(self, entity_ids: Sequence[str]) -> Proposals:
        return await self._run(self._target.proposals, entity_ids)

    async def proposal_limit(self, namespace: str | None = None) -> int | None:
        return await self._run(self._target.proposal_limit, namespace)

    async def set_proposal_limit(self, per_hour: int | None, namespace: str | None = None) -> None:
        await self._run(self._target.set_proposal_limit, per_hour, namespace)

    async def import_records(self, records: Iterable[LessonRecord]) -> ImportSummary:
        return await self._run(self._target.import_records, list(records))

    async def import_jsonl(self, lines: Iterable[str | bytes]) -> ImportSummary:
        # Passed on as given: a file is read a bounded line at a time (``read_jsonl``).
        return await self._run(self._target.import_jsonl, lines)
