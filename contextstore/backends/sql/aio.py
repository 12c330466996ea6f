"""Lessons and metrics in SQL for an event loop: SQLAlchemy's asyncio extension
(docs/design/pipeline.md).

Drivers: aiosqlite for SQLite (``sqlite://`` URLs are routed to ``sqlite+aiosqlite``) and
psycopg's async connection for PostgreSQL. The SQLite engine is configured exactly as the
sync one (WAL, busy timeout, foreign keys, SQLAlchemy-controlled ``BEGIN``).

An engine run's own two statements, the lesson read and the metrics row, skip the bridge on
PostgreSQL when the store gives a ``DriverPool`` (``backends.sql.async_direct``): the same
compiled statements, awaited on psycopg's connection directly. Metrics rows of concurrent
runs are group-committed (``contextstore.backends.batching``) on either database.

No second copy of the repositories: ``AsyncLessonRepository`` (``lessons.aio``),
``AsyncMetricsRepository`` (``metrics.aio``) and the knowledge ones below run the sync
repositories on the async engine's ``sync_engine`` inside SQLAlchemy's greenlet bridge
(``backends.sql.bridge``), each public method written out with its own signature.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.util import greenlet_spawn

from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.bridge import (
    READS_PER_STATEMENT,
    Bridge,
    CandidateReads,
    Ready,
    async_sleep,
)
from contextstore.backends.sql.database import _safe, normalise_url
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.errors import translate_errors
from contextstore.backends.sql.knowledge import KnowledgeBase, Progress
from contextstore.backends.sql.knowledge.builds import in_daemon_thread, start_task
from contextstore.backends.sql.knowledge.index import ATTEMPTS as LOCAL_ATTEMPTS
from contextstore.backends.sql.knowledge.index import LocalIndex
from contextstore.backends.sql.knowledge.reindex import ConfigureSummary
from contextstore.backends.sql.knowledge.settings import UNCHANGED, Active, Unchanged
from contextstore.backends.sql.lessons.aio import AsyncLessonRepository
from contextstore.backends.sql.lessons.imports import ImportSummary
from contextstore.backends.sql.metrics.aio import ROWS_PER_INSERT, AsyncMetricsRepository
from contextstore.backends.sql.run_reads import LessonsAndKnowledge, split_rows
from contextstore.core.analyzers import Analyzer
from contextstore.core.compose import Chunk
from contextstore.core.embedding import EmbedFn
from contextstore.core.knowledge import Document, DocumentInput
from contextstore.core.matching import Lesson, Scope, lookup_keys
from contextstore.core.retrieval import search_mode
from contextstore.errors import ConfigurationError

__all__ = [
    "POOL_OVERFLOW",
    "POOL_SIZE",
    "READS_PER_STATEMENT",
    "ROWS_PER_INSERT",
    "AsyncKnowledgeBase",
    "AsyncLessonRepository",
    "AsyncLessonsAndKnowledge",
    "AsyncMetricsRepository",
    "async_url",
    "create_async_database_engine",
]


POOL_SIZE = 16
"""Connections the async engine keeps open: at least one per run in flight (an
``AsyncContextEngine`` has 4 by default, and several engines may share a store), so a
steady stream of concurrent runs never opens and closes connections (a connection beyond
``pool_size`` is closed when returned)."""
POOL_OVERFLOW = 8
"""Connections opened beyond ``POOL_SIZE`` under a burst, closed again after use."""
PLANNED_ON_THE_LOOP_CHARS = 2_000
"""A search of a query at most this long is planned on the loop unless it must compile a
statement of more than ``COMPILED_IN_PLACE_TERMS`` terms; a longer one, or that, in a worker
thread (``docs/decisions/0065-searches-plan-off-the-event-loop.md``)."""
# One planning thread per process: the loop's thread shares the GIL with one thread at a
# time, so its turns come every few milliseconds however many new shapes arrive at once.
_PLANNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextstore-plan")


def async_url(url: str | sa.URL) -> sa.URL:
    """``url`` with the asyncio driver: ``sqlite+aiosqlite``, ``postgresql+psycopg``."""
    parsed = normalise_url(url)
    driver = dialect_of(parsed.get_backend_name()).async_driver
    return parsed if driver is None else parsed.set(drivername=driver)


def create_async_database_engine(url: str | sa.URL) -> AsyncEngine:
    """An ``AsyncEngine`` for a SQLite or PostgreSQL URL, configured as the sync one is,
    with a pool of ``POOL_SIZE`` connections (+ ``POOL_OVERFLOW``).

    ``ConfigurationError`` (naming the URL, password hidden) as ``create_database_engine``,
    and for a SQLite database in memory. Nothing connects here.
    """
    parsed = async_url(url)
    dialect_of(parsed.get_backend_name()).check_url(parsed)
    try:
        dialect = parsed.get_dialect()
        if issubclass(dialect, DefaultDialect) and dialect.get_pool_class(parsed) is StaticPool:
            # SQLAlchemy's one connection for a database in memory, shared by every task,
            # whose transactions would nest; and Alembic's engine, in a thread, would migrate
            # a database of its own.
            raise ConfigurationError(
                f"database URL {_safe(parsed)!r} is a SQLite database in memory, which an "
                "async store cannot share between its concurrent connections: use a file "
                "(sqlite:///path/to/contextstore.db)"
            )
        engine = create_async_engine(parsed, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    except (ImportError, ArgumentError) as error:
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    dialect_of(engine.sync_engine).configure(engine.sync_engine)
    return engine


class AsyncKnowledgeBase(Bridge[KnowledgeBase]):
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
        ready: Ready | None = None,
        pool: DriverPool | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("sleep", async_sleep)
        super().__init__(KnowledgeBase(engine.sync_engine, namespace, **options), ready)
        # With ``pool`` (PostgreSQL), the local index's one read per search skips the bridge.
        self._pool = pool
        # The local index's build in flight (``_build``), kept so it is not collected.
        self._build_task: asyncio.Task[bool | None] | None = None

    @property
    def namespace(self) -> str:
        return self._target.namespace

    @property
    def target(self) -> KnowledgeBase:
        """The sync ``KnowledgeBase`` whose calls this one awaits."""
        return self._target

    @property
    def embed_fn(self) -> EmbedFn | None:
        return self._target.embed_fn

    @property
    def embedder(self) -> str | None:
        return self._target.embedder

    @property
    def analyzer(self) -> Analyzer:
        return self._target.analyzer

    async def vector_backend(self) -> str:
        return await self._run(self._target.vector_backend)

    async def describe_vectors(self) -> str:
        return await self._run(self._target.describe_vectors)

    async def settings(self) -> Active:
        return await self._run(self._target.settings)

    async def configure(
        self,
        analyzer: str | None = None,
        embedder: str | Unchanged | None = UNCHANGED,
        *,
        progress: Callable[[int], None] | None = None,
        total: Callable[[int], None] | None = None,
    ) -> ConfigureSummary:
        return await self._run(
            self._target.configure, analyzer, embedder, progress=progress, total=total
        )

    async def retrieve(
        self,
        query: str,
        analysis: Any = None,
        top_k: int = 5,
        filters: Any = None,
    ) -> list[Chunk]:
        return await self.search(query, top_k, filters)

    async def search(
        self, query: str, top_k: int = 5, filters: Any = None, mode: Any = None
    ) -> list[Chunk]:
        """``KnowledgeBase.search``: a long query, or one needing a large statement compiled,
        is planned in a worker thread (its analysis and that compilation must not hold the
        loop); a short one on the loop, where the hop would cost more.
        Then its one statement is awaited and its rows ranked on the loop."""
        if self._ready is not None:
            await self._ready()
        target = self.target
        chosen = target.mode if mode is None else search_mode(mode)
        local = target.local if chosen != "vector" else None
        if local is not None:
            found = await self._local_search(target, local, query, top_k, filters)
            if found is not None:
                return found
        plan = None
        if isinstance(query, str) and len(query) <= PLANNED_ON_THE_LOOP_CHARS:
            plan = target.plan_small(query, top_k, filters, mode)
        if plan is None:
            loop = asyncio.get_running_loop()
            plan = await loop.run_in_executor(
                _PLANNER, functools.partial(target.plan, query, top_k, filters, mode)
            )
        result: list[Chunk] = await greenlet_spawn(target.finish, plan)
        if local is not None and target.needs_build(local):
            self._start_build(local)  # once this answer is made, as ``KnowledgeBase.search``
        return result

    async def _local_search(
        self, target: KnowledgeBase, local: LocalIndex, query: Any, top_k: Any, filters: Any
    ) -> list[Chunk] | None:
        """``KnowledgeBase._local_search`` awaited: the ranking on the loop (numpy, a
        millisecond or two), the read of the top chunks awaited. ``None``: search in SQL
        instead; when the index is missing or stale ``search`` then starts a build as a task
        of the loop (``_start_build``), which no search waits for."""
        for _ in range(LOCAL_ATTEMPTS):
            if isinstance(query, str) and len(query) <= PLANNED_ON_THE_LOOP_CHARS:
                request = target.lexical_request(query, top_k, filters)
            else:
                loop = asyncio.get_running_loop()
                request = await loop.run_in_executor(
                    _PLANNER, functools.partial(target.lexical_request, query, top_k, filters)
                )
            if request is None:
                return None
            terms, weights, checked = request
            if not terms or top_k <= 0:
                return []
            snapshot = local.snapshot
            if snapshot is None:
                return None  # answered in SQL, built in the background (``search``)
            if snapshot.settings_version != target.active_version():
                await greenlet_spawn(target.agrees, local, snapshot, target.settings)
                continue
            ranked = snapshot.rank(terms, top_k, checked, weights)
            values = local.fetch_values(ranked, snapshot)
            if self._pool is not None:
                with translate_errors(target.url):
                    rows = await self._pool.rows(local.statement, values)
            else:
                rows = await greenlet_spawn(target.guarded, functools.partial(local.fetch, values))
            answer = local.answer(snapshot, ranked, rows)
            if answer is not None:
                return answer
        return None

    def _start_build(self, local: LocalIndex) -> None:
        """Build ``local`` in a task of the running loop unless a build is in flight or one
        failed lately (``BuildState.claim``)."""
        if local.state.claim():
            self._build_task = start_task(self._claimed_build(local))

    async def _claimed_build(self, local: LocalIndex) -> bool | None:
        """``LocalIndex.build_once`` awaited, the claim released whatever happens: a failure
        is logged and retried on a later search, never raised to a caller."""
        error: Exception | None = None
        try:
            return await self._build(local)
        except Exception as raised:
            error = raised
            return False
        finally:
            local.state.release(error)

    async def _build(self, local: LocalIndex) -> bool | None:
        """``LocalIndex.build_once`` for the loop: the reads awaited, the CPU work on a daemon
        thread (not the planner, which searches need meanwhile, and a process may exit
        during a build)."""
        target = self.target
        read = await greenlet_spawn(target.guarded, local.read)
        if read is None:
            return None
        snapshot = await in_daemon_thread(
            functools.partial(local.build, *read), f"contextstore-index-{self.namespace}"
        )
        return local.install(snapshot, await self._generation_now(local))

    async def _generation_now(self, local: LocalIndex) -> int:
        values = local.generation_values()
        if self._pool is not None:
            with translate_errors(self.target.url):
                rows = await self._pool.rows(local.statement, values)
        else:
            rows = await greenlet_spawn(self.target.guarded, functools.partial(local.fetch, values))
        return int(rows[0][0]) if rows else 0

    async def wait_for_index(self, timeout: float | None = None) -> bool:
        """``KnowledgeBase.wait_for_index`` awaited: the build in flight is awaited, then one
        is made if the index is still missing or stale."""
        if self._ready is not None:
            await self._ready()
        local = self.target.local
        if local is None or (await self.settings()).embed_fn is not None:
            return False
        try:
            async with asyncio.timeout(timeout):
                return await self._refresh(local)
        except TimeoutError:
            return False

    async def _refresh(self, local: LocalIndex) -> bool:
        for _ in range(LOCAL_ATTEMPTS):
            task = self._build_task
            if task is not None and not task.done():
                await asyncio.shield(task)
            generation = await self._generation_now(local)
            snapshot = local.snapshot
            if snapshot is not None and snapshot.generation == generation:
                return True
            if local.too_large_at(generation):
                return False
            if not local.state.claim(now=True):
                task = self._build_task
                if task is None or task.done():
                    # Claimed by a sync search on ``target``'s index: wait in a thread.
                    await asyncio.to_thread(local.state.wait)
                continue
            task = start_task(self._claimed_build(local))
            self._build_task = task
            built = await asyncio.shield(task)
            if built:
                return True
            if built is None or local.state.failures_in_a_row:
                return False  # too large, or the build failed (logged)
        return False

    async def generation(self) -> int:
        return await self._run(self._target.generation)

    async def get(self, source: str) -> Document:
        return await self._run(self._target.get, source)

    async def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[Document]:
        return await self._run(self._target.list, prefix, limit, offset)

    async def add(
        self, text: str, source: str, metadata: Mapping[str, Any] | None = None
    ) -> Document:
        return await self._run(self._target.add, text, source, metadata)

    async def import_jsonl(
        self, lines: Iterable[str | bytes], progress: Progress | None = None
    ) -> ImportSummary:
        return await self._run(self._target.import_jsonl, lines, progress)

    async def import_documents(
        self, documents: Sequence[DocumentInput], progress: Progress | None = None
    ) -> ImportSummary:
        return await self._run(self._target.import_documents, documents, progress)

    async def delete(self, source: str, *, missing_ok: bool = False) -> bool:
        return await self._run(self._target.delete, source, missing_ok=missing_ok)

    async def reembed(self, progress: Progress | None = None, batch_size: int = 500) -> int:
        return await self._run(self._target.reembed, progress, batch_size)


class AsyncLessonsAndKnowledge(Bridge[LessonsAndKnowledge]):
    """``LessonsAndKnowledge`` awaited: the lesson candidates and the generation of
    ``knowledge`` (an ``AsyncKnowledgeBase`` on ``engine``) in one statement."""

    def __init__(
        self,
        engine: AsyncEngine,
        knowledge: AsyncKnowledgeBase,
        *,
        ready: Ready | None = None,
        pool: DriverPool | None = None,
    ) -> None:
        """With ``pool`` (PostgreSQL), the statement is sent on the driver directly, the
        reads of concurrent calls as one statement."""
        target = LessonsAndKnowledge(engine.sync_engine, knowledge.target)
        super().__init__(target, ready)
        self.knowledge = knowledge
        self._reads: CandidateReads | None = None
        if pool is not None:
            self._reads = CandidateReads(pool, target.candidates_read, engine.sync_engine.url)

    async def candidates(self, scope: Scope) -> list[Lesson]:
        return await self._run(self._target.candidates, scope)

    async def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int]:
        if self._reads is None:
            return await self._run(self._target.candidates_with_generation, scope)
        if self._ready is not None:
            await self._ready()
        return split_rows(await self._reads.rows(sorted(lookup_keys(scope))))
