"""``connect_async()``: ``connect()`` for an event loop (SPEC §8).

The same wiring, URLs and environment variables as ``connect()``, on the asyncio drivers:
lessons and metrics through SQLAlchemy's asyncio extension (aiosqlite, psycopg async), the
cache and windows on ``redis.asyncio`` with the same scripts, keys and fault policy (or in
process memory without a Redis URL). ``connect_async()`` itself does no I/O; the database is
migrated to head on first use, in a worker thread, so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

from contextstore.adaptive.base import AsyncWindows
from contextstore.adaptive.memory import AsyncMemoryWindows
from contextstore.cache.base import AsyncContextCache
from contextstore.cache.memory import AsyncMemoryContextCache
from contextstore.config import ContextEngineConfig

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from contextstore.async_engine import AsyncContextEngine
    from contextstore.redis.client import AsyncRedisClient, FaultPolicy
    from contextstore.sql.aio import (
        AsyncKnowledgeBase,
        AsyncLessonRepository,
        AsyncLessonsAndKnowledge,
        AsyncMetricsRepository,
    )
    from contextstore.sql.async_direct import DriverPool

__all__ = ["AsyncStore", "connect_async"]


class AsyncStore:
    """The shared state of one namespace, for an event loop: ``.lessons``, ``.knowledge``,
    ``.metrics``, ``.cache``, ``.windows`` and ``.engine(...)``.

    ``async with connect_async() as store:`` closes it on the way out; else ``await
    store.aclose()``."""

    def __init__(self, config: ContextEngineConfig) -> None:
        self.config = config
        self._migrated = False
        self._migrating: asyncio.Lock | None = None

    @property
    def namespace(self) -> str:
        return self.config.namespace

    @property
    def uses_redis(self) -> bool:
        return self.config.redis_url is not None

    @cached_property
    def sql_engine(self) -> AsyncEngine:
        """The ``AsyncEngine`` (not yet migrated: the repositories migrate on first use)."""
        from contextstore.sql.aio import create_async_database_engine

        return create_async_database_engine(self.config.database_url)

    @cached_property
    def driver_pool(self) -> DriverPool | None:
        """PostgreSQL: the driver connections an engine run's own statements are sent on
        (``contextstore.sql.async_direct``); ``None`` on SQLite."""
        if self.sql_engine.dialect.name != "postgresql":
            return None
        from contextstore.sql.aio import POOL_SIZE
        from contextstore.sql.async_direct import DriverPool

        return DriverPool(self.sql_engine, POOL_SIZE)

    async def ready(self) -> None:
        """Migrate the database to head, once (later calls return at once)."""
        if self._migrated:
            return
        if self._migrating is None:
            self._migrating = asyncio.Lock()
        async with self._migrating:
            if not self._migrated:
                from contextstore.sql.database import migrate

                # Alembic is synchronous; a thread keeps the loop free while it works.
                await asyncio.to_thread(migrate, self.config.database_url)
                self._migrated = True

    @cached_property
    def lessons(self) -> AsyncLessonRepository:
        from contextstore.sql.aio import AsyncLessonRepository

        return AsyncLessonRepository(self.sql_engine, ready=self.ready, pool=self.driver_pool)

    @cached_property
    def knowledge(self) -> AsyncKnowledgeBase:
        """The namespace's documents in SQL (``Store.knowledge``, awaited); the engine's
        retriever unless one is given."""
        from contextstore.sql.aio import AsyncKnowledgeBase

        retrieval = self.config.retrieval
        embed_fn = None
        if retrieval.embeddings:
            from contextstore.embedding import HashingEmbedder

            embed_fn = HashingEmbedder()
        return AsyncKnowledgeBase(
            self.sql_engine,
            self.namespace,
            ready=self.ready,
            embed_fn=embed_fn,
            candidate_limit=retrieval.candidate_limit,
        )

    @cached_property
    def run_reads(self) -> AsyncLessonsAndKnowledge:
        """``lessons`` and ``knowledge`` read together: an engine's SQL read, one statement."""
        from contextstore.sql.aio import AsyncLessonsAndKnowledge

        return AsyncLessonsAndKnowledge(
            self.sql_engine, self.knowledge, ready=self.ready, pool=self.driver_pool
        )

    @cached_property
    def metrics(self) -> AsyncMetricsRepository:
        from contextstore.sql.aio import AsyncMetricsRepository

        return AsyncMetricsRepository(self.sql_engine, ready=self.ready, pool=self.driver_pool)

    @cached_property
    def redis(self) -> AsyncRedisClient | None:
        """The ``redis.asyncio`` client (``Redis`` or ``RedisCluster``), or ``None``."""
        if self.config.redis_url is None:
            return None
        from contextstore.redis.client import async_client_from_url

        return async_client_from_url(self.config.redis_url)

    @cached_property
    def fault(self) -> FaultPolicy:
        """One fault policy for the cache and the windows: one outage, one WARNING per interval."""
        from contextstore.redis.client import FaultPolicy

        return FaultPolicy()

    @cached_property
    def cache(self) -> AsyncContextCache:
        size, ttl = self.config.cache.max_size, self.config.cache.ttl_seconds
        if self.redis is None:
            return AsyncMemoryContextCache(size, ttl)
        from contextstore.redis.cache import AsyncRedisContextCache

        return AsyncRedisContextCache(
            self.redis, namespace=self.namespace, max_size=size, ttl_seconds=ttl, fault=self.fault
        )

    @cached_property
    def windows(self) -> AsyncWindows:
        if self.redis is None:
            return AsyncMemoryWindows()
        from contextstore.redis.windows import AsyncRedisWindows

        return AsyncRedisWindows(self.redis, namespace=self.namespace, fault=self.fault)

    def engine(self, **kwargs: Any) -> AsyncContextEngine:
        """An ``AsyncContextEngine`` on this store's backends; keyword arguments override any
        part (``retriever``, ``worker``, ``cache``, …)."""
        from contextstore.async_engine import AsyncContextEngine

        parts: dict[str, Any] = {
            "retriever": self.knowledge,
            "lessons": self.lessons,
            "cache": self.cache if self.config.cache.enabled else None,
            "windows": self.windows,
            "metrics": self.metrics,
        }
        parts.update(kwargs)
        if parts["lessons"] is self.lessons and parts["retriever"] is self.knowledge:
            # Both in this store's database: one statement reads the candidates and the
            # knowledge generation, instead of one each.
            parts["lessons"] = self.run_reads
        return AsyncContextEngine(self.config, **parts)

    async def aclose(self) -> None:
        """Release connections. The store may not be used afterwards."""
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
    from contextstore.store import connect

    return AsyncStore(connect(database_url, redis_url, namespace, config=config).config)
