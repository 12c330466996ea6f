"""``connect_async()``: ``connect()`` for an event loop.

The same wiring, URLs and environment variables as ``connect()``, on the asyncio drivers:
lessons and metrics through SQLAlchemy's asyncio extension (aiosqlite, psycopg async), the
cache and windows on ``redis.asyncio`` with the same scripts, keys and fault policy (or in
process memory without a Redis URL). ``connect_async()`` itself does no I/O; the database is
migrated to head on first use, in a worker thread, so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Self, TypedDict, TypeVar, Unpack

from contextstore.backends.cache import AsyncContextCache, ContextCache
from contextstore.backends.memory.cache import AsyncMemoryContextCache
from contextstore.backends.memory.windows import AsyncMemoryWindows
from contextstore.backends.windows import AsyncWindows, Windows
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.embedding import EmbedFn
from contextstore.core.lessons import AsyncLessonSource, LessonSource
from contextstore.core.metrics import AsyncMetricsSink, MetricsSink
from contextstore.core.retrieval import AsyncRetriever, Retriever
from contextstore.store.sync import StoreBase, store_config

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from contextstore.backends.redis.client import AsyncRedisClient
    from contextstore.backends.sql.aio import (
        AsyncKnowledgeBase,
        AsyncLessonRepository,
        AsyncLessonsAndKnowledge,
        AsyncMetricsRepository,
    )
    from contextstore.backends.sql.async_direct import DriverPool
    from contextstore.backends.sql.knowledge import KnowledgeBase
    from contextstore.backends.sql.metrics import MetricsRepository
    from contextstore.backends.sql.repository import LessonRepository
    from contextstore.engine.aio import AsyncContextEngine

__all__ = ["AsyncEngineParts", "AsyncStore", "connect_async"]

T = TypeVar("T")


class AsyncEngineParts(TypedDict, total=False):
    """What ``AsyncStore.engine`` lets a caller replace: ``AsyncContextEngine``'s keyword
    arguments."""

    retriever: AsyncRetriever | Retriever | None
    lessons: AsyncLessonSource | LessonSource | None
    cache: AsyncContextCache | ContextCache | None
    windows: AsyncWindows | Windows | None
    metrics: AsyncMetricsSink | MetricsSink | None
    analyzer: RuleBasedQueryAnalyzer | None
    embed_fn: EmbedFn | None
    worker: str | None
    timer: Callable[[], float]
    now: Callable[[], datetime]
    concurrency: int | None


def _sleep_on_the_loop(seconds: float) -> None:
    """``time.sleep`` for code inside ``run_sync``: the event loop runs meanwhile."""
    from sqlalchemy.util import await_only

    await_only(asyncio.sleep(seconds))


class AsyncStore(StoreBase):
    """The shared state of one namespace, for an event loop: ``.lessons``, ``.knowledge``,
    ``.metrics``, ``.cache``, ``.windows`` and ``.engine(...)``.

    ``async with connect_async() as store:`` closes it on the way out; else ``await
    store.aclose()``."""

    def __init__(self, config: ContextEngineConfig, *, lender: AsyncStore | None = None) -> None:
        super().__init__(config)
        # A store made by ``for_namespace`` borrows its lender's connections and migration.
        self._lender = lender
        self._migrated = False
        self._migrating: asyncio.Lock | None = None

    def for_namespace(self, namespace: str) -> AsyncStore:
        """A store for ``namespace`` on the same database and Redis that shares this store's
        connections (SQL pool, driver pool, Redis client) instead of opening its own: a
        service answering many namespaces holds one set of connections, not one per
        namespace. Closing it closes nothing; closing this store closes both."""
        lender = self._lender or self
        return AsyncStore(replace(self.config, namespace=namespace), lender=lender)

    @cached_property
    def sql_engine(self) -> AsyncEngine:
        """The ``AsyncEngine`` (not yet migrated: the repositories migrate on first use)."""
        if self._lender is not None:
            return self._lender.sql_engine
        from contextstore.backends.sql.aio import create_async_database_engine

        return create_async_database_engine(self.config.database_url)

    @cached_property
    def driver_pool(self) -> DriverPool | None:
        """PostgreSQL: the driver connections an engine run's own statements are sent on
        (``contextstore.backends.sql.async_direct``); ``None`` on SQLite."""
        if self._lender is not None:
            return self._lender.driver_pool
        from contextstore.backends.sql.aio import POOL_SIZE
        from contextstore.backends.sql.async_direct import DriverPool
        from contextstore.backends.sql.dialects import dialect_of

        if not dialect_of(self.sql_engine.sync_engine).serves_driver_pool:
            return None

        return DriverPool(self.sql_engine, POOL_SIZE)

    async def ready(self) -> None:
        """Migrate the database to head, once (later calls return at once)."""
        if self._lender is not None:
            return await self._lender.ready()
        if self._migrated:
            return
        if self._migrating is None:
            self._migrating = asyncio.Lock()
        async with self._migrating:
            if not self._migrated:
                from contextstore.backends.sql.database import migrate

                # Alembic is synchronous; a thread keeps the loop free while it works.
                await asyncio.to_thread(migrate, self.config.database_url)
                self._migrated = True

    @cached_property
    def lessons(self) -> AsyncLessonRepository:
        from contextstore.backends.sql.aio import AsyncLessonRepository

        return AsyncLessonRepository(
            self.sql_engine, ready=self.ready, pool=self.driver_pool, namespace=self.namespace
        )

    @cached_property
    def knowledge(self) -> AsyncKnowledgeBase:
        """The namespace's documents in SQL (``Store.knowledge``, awaited); the engine's
        retriever unless one is given."""
        from contextstore.backends.sql.aio import AsyncKnowledgeBase

        return AsyncKnowledgeBase(
            self.sql_engine,
            self.namespace,
            ready=self.ready,
            pool=self.driver_pool,
            **self.knowledge_options(),
        )

    @cached_property
    def run_reads(self) -> AsyncLessonsAndKnowledge:
        """``lessons`` and ``knowledge`` read together: an engine's SQL read, one statement."""
        from contextstore.backends.sql.aio import AsyncLessonsAndKnowledge

        return AsyncLessonsAndKnowledge(
            self.sql_engine, self.knowledge, ready=self.ready, pool=self.driver_pool
        )

    @cached_property
    def metrics(self) -> AsyncMetricsRepository:
        """The namespace's metrics rows (``Store.metrics``, awaited): inside the namespace
        unless a call passes ``all_namespaces=True``."""
        from contextstore.backends.sql.aio import AsyncMetricsRepository

        return AsyncMetricsRepository(
            self.sql_engine, namespace=self.namespace, ready=self.ready, pool=self.driver_pool
        )

    @cached_property
    def redis(self) -> AsyncRedisClient | None:
        """The ``redis.asyncio`` client (``Redis`` or ``RedisCluster``), or ``None``."""
        if self.config.redis_url is None:
            return None
        if self._lender is not None:
            return self._lender.redis
        from contextstore.backends.redis.client import async_client_from_url

        return async_client_from_url(self.config.redis_url)

    @cached_property
    def cache(self) -> AsyncContextCache:
        size, ttl = self.config.cache.max_size, self.config.cache.ttl_seconds
        if self.redis is None:
            return AsyncMemoryContextCache(size, ttl)
        from contextstore.backends.redis.cache import AsyncRedisContextCache

        return AsyncRedisContextCache(
            self.redis, namespace=self.namespace, max_size=size, ttl_seconds=ttl, fault=self.fault
        )

    @cached_property
    def windows(self) -> AsyncWindows:
        if self.redis is None:
            return AsyncMemoryWindows()
        from contextstore.backends.redis.windows import AsyncRedisWindows

        return AsyncRedisWindows(self.redis, namespace=self.namespace, fault=self.fault)

    def engine(self, **parts: Unpack[AsyncEngineParts]) -> AsyncContextEngine:
        """An ``AsyncContextEngine`` on this store's backends; keyword arguments replace any
        part (``retriever``, ``worker``, ``cache``, …). The ports are chosen as
        ``Store.engine`` chooses them; on PostgreSQL the lesson and metrics statements of a
        run go to the driver directly (``contextstore.backends.sql.async_direct``)."""
        from contextstore.backends.redis.phases import async_fused_state
        from contextstore.engine.aio import AsyncContextEngine

        chosen: AsyncEngineParts = {
            "retriever": self.knowledge,
            "lessons": self.lessons,
            "cache": self.cache if self.config.cache.enabled else None,
            "windows": self.windows,
            "metrics": self.metrics,
        }
        chosen.update(parts)
        joint = chosen["lessons"] is self.lessons and chosen["retriever"] is self.knowledge
        return AsyncContextEngine(
            self.config,
            state=async_fused_state(chosen["cache"], chosen["windows"]),
            reads=self.run_reads if joint else None,
            **chosen,
        )

    # -- blocking repositories, run on the event loop ---------------------------------------

    @cached_property
    def blocking_lessons(self) -> LessonRepository:
        """``LessonRepository`` on this store's connections, for ``run_sync`` only."""
        from contextstore.backends.sql.repository import LessonRepository

        return LessonRepository(self.sql_engine.sync_engine, sleep=_sleep_on_the_loop)

    @cached_property
    def blocking_metrics(self) -> MetricsRepository:
        """``MetricsRepository`` on this store's connections, bound to its namespace as
        ``metrics`` is, for ``run_sync`` only."""
        return self.blocking_metrics_of(self.namespace)

    def blocking_metrics_of(self, namespace: str) -> MetricsRepository:
        """``blocking_metrics`` bound to ``namespace`` instead, on this store's connections:
        for a caller that answers for several namespaces of one database (the service), so
        a namespace's metrics read opens no pool of its own."""
        from contextstore.backends.sql.metrics import MetricsRepository

        return MetricsRepository(
            self.sql_engine.sync_engine, namespace=namespace, sleep=_sleep_on_the_loop
        )

    @property
    def blocking_knowledge(self) -> KnowledgeBase:
        """``KnowledgeBase`` on this store's connections (the one ``knowledge`` awaits), for
        ``run_sync`` only."""
        return self.knowledge.target

    async def run_sync(self, work: Callable[[], T]) -> T:
        """``work()`` on the event loop, through SQLAlchemy's greenlet bridge: the blocking
        repositories it calls (``blocking_lessons``, ``blocking_metrics``,
        ``blocking_knowledge``) send their statements on the asyncio driver, awaited, as
        ``AsyncSession.run_sync`` does. The database is migrated first (``ready``)."""
        from sqlalchemy.util import greenlet_spawn

        await self.ready()
        result: T = await greenlet_spawn(work)
        return result

    async def aclose(self) -> None:
        """Release connections (a borrowing store's belong to its lender, which closes them).
        The store may not be used afterwards."""
        if self._lender is not None:
            return
        if "driver_pool" in self.__dict__ and self.driver_pool is not None:
            await self.driver_pool.aclose()
        if "sql_engine" in self.__dict__:
            await self.sql_engine.dispose()
        if "redis" in self.__dict__ and self.redis is not None:
            await self.redis.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def connect_async(
    database_url: str | None = None,
    redis_url: str | None = None,
    namespace: str | None = None,
    *,
    config: ContextEngineConfig | None = None,
) -> AsyncStore:
    """An ``AsyncStore`` wired from the arguments, else ``config``, else the environment,
    exactly as ``connect()`` reads them. Nothing connects until a part is first used."""
    return AsyncStore(store_config(database_url, redis_url, namespace, config))
