"""Lessons and metrics in SQL for an event loop: SQLAlchemy's asyncio extension (SPEC §8).

Drivers: aiosqlite for SQLite (``sqlite://`` URLs are routed to ``sqlite+aiosqlite``) and
psycopg's async connection for PostgreSQL. The SQLite engine is configured exactly as the
sync one (WAL, busy timeout, foreign keys, SQLAlchemy-controlled ``BEGIN``).

An engine run's own two statements, the lesson read and the metrics row, skip the bridge on
PostgreSQL when the store gives a ``DriverPool`` (``contextstore.sql.async_direct``): the same
compiled statements, awaited on psycopg's connection directly. Metrics rows of concurrent
runs are group-committed (``contextstore.batching``) on either database.

No second copy of the repositories: ``AsyncLessonRepository`` and ``AsyncMetricsRepository``
run the sync ``LessonRepository`` and ``MetricsRepository`` on the async engine's
``sync_engine`` inside SQLAlchemy's greenlet bridge (``greenlet_spawn``), the mechanism
``AsyncSession.run_sync`` is built on. Every statement is then awaited on the event loop by
the async driver; nothing blocks it, and the statements, validation, error translation and
round trips are exactly the sync repository's. A retry that waits out a SQLite lock sleeps
with ``asyncio.sleep``.

Methods not wrapped explicitly below are reached through ``__getattr__`` the same way:
``await store.lessons.export_records()`` works for every public method of the sync class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import await_only, greenlet_spawn

from contextstore.batching import Batcher
from contextstore.compose import Chunk
from contextstore.errors import BackendUnavailableError, ConfigurationError
from contextstore.lessons import LessonRecord
from contextstore.matching import Lesson, Scope, lookup_keys
from contextstore.metrics import QueryMetric
from contextstore.sql.async_direct import DriverPool
from contextstore.sql.database import (
    _check_sqlite_path,
    _configure_sqlite,
    _safe,
    normalise_url,
    translate_errors,
)
from contextstore.sql.direct import DirectStatement
from contextstore.sql.knowledge import KnowledgeBase
from contextstore.sql.metric_validation import row_values
from contextstore.sql.metrics import (
    GroupRow,
    LessonStats,
    MetricsReport,
    MetricsRepository,
    rows_parameters,
    translate_metrics_error,
)
from contextstore.sql.repository import ImportSummary, LessonRepository, candidate_lessons
from contextstore.sql.run_reads import LessonsAndKnowledge, split_rows

__all__ = [
    "AsyncKnowledgeBase",
    "AsyncLessonRepository",
    "AsyncLessonsAndKnowledge",
    "AsyncMetricsRepository",
    "async_url",
    "create_async_database_engine",
]

T = TypeVar("T")

POOL_SIZE = 16
"""Connections the async engine keeps open: at least one per run in flight (an
``AsyncContextEngine`` has 4 by default, and several engines may share a store), so a
steady stream of concurrent runs never opens and closes connections (a connection beyond
``pool_size`` is closed when returned)."""
POOL_OVERFLOW = 8
"""Connections opened beyond ``POOL_SIZE`` under a burst, closed again after use."""
READS_PER_STATEMENT = 64
"""Most concurrent runs' candidate reads one statement answers (``_CandidateReads``)."""
ROWS_PER_INSERT = 64
"""Most metrics rows one group-committed INSERT carries (PostgreSQL binds at most 65,535
parameters, SQLite 32,766; a row binds 22)."""


def async_url(url: str | sa.URL) -> sa.URL:
    """``url`` with the asyncio driver: ``sqlite+aiosqlite``, ``postgresql+psycopg``."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    return parsed


def create_async_database_engine(url: str | sa.URL) -> AsyncEngine:
    """An ``AsyncEngine`` for a SQLite or PostgreSQL URL, configured as the sync one is,
    with a pool of ``POOL_SIZE`` connections (+ ``POOL_OVERFLOW``).

    ``ConfigurationError`` (naming the URL, password hidden) as ``create_database_engine``.
    Nothing connects here.
    """
    parsed = async_url(url)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_path(parsed)
    try:
        engine = create_async_engine(parsed, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    except (ImportError, ArgumentError) as error:
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine.sync_engine)
    return engine


def _async_sleep(seconds: float) -> None:
    """``time.sleep`` for code running inside ``greenlet_spawn``: yields to the loop."""
    await_only(asyncio.sleep(seconds))


class _CandidateReads:
    """The candidate reads of concurrent runs, sent on ``pool`` as one statement over the
    union of their keys (``contextstore.batching``).

    A candidate row is a lesson and one key of the read that it matched, so the rows of a
    run's own keys are exactly the rows its own statement would return; a row without an
    entity id (the knowledge generation of the joint read) belongs to every run.
    ``read(keys)`` gives the statement and its values for sorted keys (``candidates_read``).
    """

    def __init__(
        self,
        pool: DriverPool,
        read: Callable[[list[str]], tuple[DirectStatement, dict[str, Any]]],
        url: sa.URL,
    ) -> None:
        self._pool = pool
        self._statement_for = read
        self._url = url
        self._batch: Batcher[list[str], list[Any]] = Batcher(self._read, limit=READS_PER_STATEMENT)

    async def rows(self, keys: list[str]) -> list[Any]:
        """The rows ``statement`` returns for ``keys``."""
        return await self._batch.submit(keys)

    async def _read(self, reads: list[list[str]]) -> list[list[Any]]:
        union = sorted(set().union(*reads)) if len(reads) > 1 else reads[0]
        with translate_errors(self._url):
            rows = await self._pool.rows(*self._statement_for(union))
        if len(reads) == 1:
            return [rows]
        shared: list[Any] = []
        by_key: dict[str, list[Any]] = {}
        for row in rows:
            if row[0] is None:
                shared.append(row)
            else:
                by_key.setdefault(row[4], []).append(row)
        return [[*shared, *(row for key in keys for row in by_key.get(key, ()))] for keys in reads]


class _Bridge:
    """Runs the methods of a sync repository on the event loop (see the module doc)."""

    def __init__(self, target: Any, ready: Callable[[], Awaitable[None]] | None) -> None:
        self._target = target
        self._ready = ready

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._ready is not None:
            await self._ready()
        return await greenlet_spawn(getattr(self._target, name), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute  # a plain value (``actor``, ``namespace``): no I/O to await

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(name, *args, **kwargs)

        call.__name__ = name
        return call


class AsyncLessonRepository(_Bridge):
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
        ready: Callable[[], Awaitable[None]] | None = None,
        pool: DriverPool | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to ``LessonRepository`` (``clock``, ``actor``); an import's pauses
        between transactions and its retries wait with ``asyncio.sleep``."""
        options.setdefault("sleep", _async_sleep)
        target = LessonRepository(engine.sync_engine, **options)
        super().__init__(target, ready)
        self._reads: _CandidateReads | None = None
        if pool is not None:
            self._reads = _CandidateReads(pool, target.candidates_read, engine.sync_engine.url)

    async def candidates(self, scope: Scope, *, include_inactive: bool = False) -> list[Lesson]:
        """``LessonRepository.candidates``; with ``pool`` (PostgreSQL), the active lessons
        are read on the driver directly, concurrent reads as one statement."""
        keys = sorted(lookup_keys(scope))
        if self._reads is None or include_inactive or not keys:
            result: list[Lesson] = await self._call(
                "candidates", scope, include_inactive=include_inactive
            )
            return result
        if self._ready is not None:
            await self._ready()
        return candidate_lessons(await self._reads.rows(keys))

    async def get(self, entity_id: str) -> LessonRecord:
        result: LessonRecord = await self._call("get", entity_id)
        return result

    async def list(self, **filters: Any) -> list[LessonRecord]:
        result: list[LessonRecord] = await self._call("list", **filters)
        return result

    async def add(self, record: LessonRecord) -> LessonRecord:
        result: LessonRecord = await self._call("add", record)
        return result

    async def update(self, entity_id: str, **changes: Any) -> LessonRecord:
        result: LessonRecord = await self._call("update", entity_id, **changes)
        return result

    async def activate(self, entity_id: str) -> LessonRecord:
        result: LessonRecord = await self._call("activate", entity_id)
        return result

    async def retire(self, entity_id: str) -> LessonRecord:
        result: LessonRecord = await self._call("retire", entity_id)
        return result

    async def supersede(self, old_id: str, new_id: str) -> LessonRecord:
        result: LessonRecord = await self._call("supersede", old_id, new_id)
        return result

    async def delete(self, entity_id: str) -> None:
        await self._call("delete", entity_id)

    async def import_records(self, records: Iterable[LessonRecord]) -> ImportSummary:
        result: ImportSummary = await self._call("import_records", list(records))
        return result

    async def import_jsonl(self, lines: Iterable[str]) -> ImportSummary:
        result: ImportSummary = await self._call("import_jsonl", list(lines))
        return result


class AsyncMetricsRepository(_Bridge):
    """``MetricsRepository`` awaited: the same methods, arguments, results and errors.

    ``record`` validates the metric (``ValidationError`` naming the field, nothing written)
    and returns once its row is durable. The rows of records awaited at the same time are
    group-committed: one INSERT, one commit (``contextstore.batching``). With
    ``pool`` (PostgreSQL), that INSERT is sent on the driver directly. Implements the async
    metrics sink the ``AsyncContextEngine`` writes to.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        clock: Callable[[], datetime] | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
        pool: DriverPool | None = None,
    ) -> None:
        options: dict[str, Any] = {"sleep": _async_sleep}
        if clock is not None:
            options["clock"] = clock
        super().__init__(MetricsRepository(engine.sync_engine, **options), ready)
        self._pool = pool
        # A refused batch is written again a row at a time (only the refused rows' callers
        # fail); an unreachable database fails the batch.
        self._commits: Batcher[dict[str, Any], None] = Batcher(
            self._insert_rows,
            limit=ROWS_PER_INSERT,
            alone=lambda error: not isinstance(error, BackendUnavailableError),
        )

    async def record(self, metric: QueryMetric) -> None:
        values = row_values(metric)
        if self._ready is not None:
            await self._ready()
        await self._commits.submit(values)

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> list[None]:
        target: MetricsRepository = self._target
        if self._pool is None:
            await greenlet_spawn(target.insert_rows, rows)
            return [None] * len(rows)
        insert = target.rows_insert(tuple(rows[0]), len(rows))
        try:
            await self._pool.execute(insert, rows_parameters(rows))
        except sa.exc.SQLAlchemyError as error:
            raise translate_metrics_error(error) from error
        return [None] * len(rows)

    async def record_many(self, metrics: Iterable[QueryMetric]) -> int:
        result: int = await self._call("record_many", list(metrics))
        return result

    async def prune(self, older_than: datetime | timedelta, namespace: str | None = None) -> int:
        result: int = await self._call("prune", older_than, namespace)
        return result

    async def count(self, **filters: Any) -> int:
        result: int = await self._call("count", **filters)
        return result

    async def report(self, **filters: Any) -> MetricsReport:
        result: MetricsReport = await self._call("report", **filters)
        return result

    async def lesson_stats(self, **filters: Any) -> LessonStats:
        result: LessonStats = await self._call("lesson_stats", **filters)
        return result

    async def groups(self, by: str, **filters: Any) -> tuple[GroupRow, ...]:
        result: tuple[GroupRow, ...] = await self._call("groups", by, **filters)
        return result


class AsyncKnowledgeBase(_Bridge):
    """``KnowledgeBase`` awaited: the same methods, arguments, results and errors; the
    ``AsyncContextEngine``'s retriever (``retrieve`` and ``generation`` are awaited).

    ``engine`` is the async engine; ``options`` go to ``KnowledgeBase`` (``embed_fn``,
    ``candidate_limit``, …).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        namespace: str = "default",
        *,
        ready: Callable[[], Awaitable[None]] | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("sleep", _async_sleep)
        super().__init__(KnowledgeBase(engine.sync_engine, namespace, **options), ready)

    @property
    def namespace(self) -> str:
        namespace: str = self._target.namespace
        return namespace

    @property
    def target(self) -> KnowledgeBase:
        """The sync ``KnowledgeBase`` whose calls this one awaits."""
        target: KnowledgeBase = self._target
        return target

    async def retrieve(
        self,
        query: str,
        analysis: Any = None,
        top_k: int = 5,
        filters: Any = None,
    ) -> list[Chunk]:
        result: list[Chunk] = await self._call("retrieve", query, analysis, top_k, filters)
        return result

    async def search(self, query: str, top_k: int = 5, filters: Any = None) -> list[Chunk]:
        result: list[Chunk] = await self._call("search", query, top_k, filters)
        return result

    async def generation(self) -> int:
        result: int = await self._call("generation")
        return result


class AsyncLessonsAndKnowledge(_Bridge):
    """``LessonsAndKnowledge`` awaited: the lesson candidates and the generation of
    ``knowledge`` (an ``AsyncKnowledgeBase`` on ``engine``) in one statement."""

    def __init__(
        self,
        engine: AsyncEngine,
        knowledge: AsyncKnowledgeBase,
        *,
        ready: Callable[[], Awaitable[None]] | None = None,
        pool: DriverPool | None = None,
    ) -> None:
        """With ``pool`` (PostgreSQL), the statement is sent on the driver directly, the
        reads of concurrent calls as one statement."""
        target = LessonsAndKnowledge(engine.sync_engine, knowledge.target)
        super().__init__(target, ready)
        self.knowledge = knowledge
        self._reads: _CandidateReads | None = None
        if pool is not None:
            self._reads = _CandidateReads(pool, target.candidates_read, engine.sync_engine.url)

    async def candidates(self, scope: Scope) -> list[Lesson]:
        result: list[Lesson] = await self._call("candidates", scope)
        return result

    async def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int]:
        if self._reads is None:
            result: tuple[list[Lesson], int] = await self._call("candidates_with_generation", scope)
            return result
        if self._ready is not None:
            await self._ready()
        return split_rows(await self._reads.rows(sorted(lookup_keys(scope))))
