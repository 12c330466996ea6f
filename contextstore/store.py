"""``connect()``: one object that wires every backend from URLs or the environment.

SQL (lessons, metrics) always exists: SQLite in the working directory unless
``CONTEXTSTORE_DATABASE_URL`` says otherwise, migrated to head on first use. Redis is used
for the cache and the adaptive windows when ``CONTEXTSTORE_REDIS_URL`` is set; otherwise both
live in process memory. Everything is built lazily, so ``connect()`` itself does no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from contextstore.adaptive.base import Windows
from contextstore.adaptive.memory import MemoryWindows
from contextstore.cache.base import ContextCache
from contextstore.cache.memory import MemoryContextCache
from contextstore.config import ContextEngineConfig
from contextstore.resources import Closeable

if TYPE_CHECKING:
    import sqlalchemy

    from contextstore.engine import ContextEngine
    from contextstore.redis.client import FaultPolicy
    from contextstore.sql.knowledge import KnowledgeBase
    from contextstore.sql.metrics import MetricsRepository
    from contextstore.sql.repository import LessonRepository
    from contextstore.sql.run_reads import LessonsAndKnowledge


class Store(Closeable):
    """The shared state of one namespace: ``.lessons``, ``.knowledge``, ``.metrics``,
    ``.cache``, ``.windows``."""

    def __init__(self, config: ContextEngineConfig) -> None:
        self.config = config

    @property
    def namespace(self) -> str:
        return self.config.namespace

    @property
    def uses_redis(self) -> bool:
        return self.config.redis_url is not None

    @cached_property
    def sql_engine(self) -> sqlalchemy.Engine:
        from contextstore.sql.database import create_database_engine, migrate

        engine = create_database_engine(self.config.database_url)
        migrate(engine)
        return engine

    @cached_property
    def lessons(self) -> LessonRepository:
        from contextstore.sql.repository import LessonRepository

        return LessonRepository(self.sql_engine)

    @cached_property
    def knowledge(self) -> KnowledgeBase:
        """The namespace's documents in SQL; the engine's retriever unless one is given."""
        from contextstore.sql.knowledge import KnowledgeBase

        retrieval = self.config.retrieval
        embed_fn = None
        if retrieval.embeddings:
            from contextstore.embedding import HashingEmbedder

            embed_fn = HashingEmbedder()
        return KnowledgeBase(
            self.sql_engine,
            self.namespace,
            embed_fn=embed_fn,
            candidate_limit=retrieval.candidate_limit,
        )

    @cached_property
    def run_reads(self) -> LessonsAndKnowledge:
        """``lessons`` and ``knowledge`` read together: an engine's SQL read, one statement."""
        from contextstore.sql.run_reads import LessonsAndKnowledge

        return LessonsAndKnowledge(self.sql_engine, self.knowledge)

    @cached_property
    def metrics(self) -> MetricsRepository:
        from contextstore.sql.metrics import MetricsRepository

        return MetricsRepository(self.sql_engine)

    @cached_property
    def redis(self) -> Any:
        """The redis-py client (``Redis`` or ``RedisCluster``), or ``None`` without a URL."""
        if self.config.redis_url is None:
            return None
        from contextstore.redis.client import client_from_url

        return client_from_url(self.config.redis_url)

    @cached_property
    def fault(self) -> FaultPolicy:
        """One fault policy for the cache and the windows: one outage, one WARNING per interval."""
        from contextstore.redis.client import FaultPolicy

        return FaultPolicy()

    @cached_property
    def cache(self) -> ContextCache:
        size, ttl = self.config.cache.max_size, self.config.cache.ttl_seconds
        if self.redis is None:
            return MemoryContextCache(size, ttl)
        from contextstore.redis.cache import RedisContextCache

        return RedisContextCache(
            self.redis, namespace=self.namespace, max_size=size, ttl_seconds=ttl, fault=self.fault
        )

    @cached_property
    def windows(self) -> Windows:
        if self.redis is None:
            return MemoryWindows()
        from contextstore.redis.windows import RedisWindows

        return RedisWindows(self.redis, namespace=self.namespace, fault=self.fault)

    def engine(self, **kwargs: Any) -> ContextEngine:
        """A ``ContextEngine`` on this store's backends; keyword arguments override any part."""
        from contextstore.engine import ContextEngine

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
        return ContextEngine(self.config, **parts)

    def close(self) -> None:
        """Release connections. The store may not be used afterwards."""
        if "sql_engine" in self.__dict__:
            self.sql_engine.dispose()
        if "redis" in self.__dict__ and self.redis is not None:
            self.redis.close()


def connect(
    database_url: str | None = None,
    redis_url: str | None = None,
    namespace: str | None = None,
    *,
    config: ContextEngineConfig | None = None,
) -> Store:
    """A ``Store`` wired from the arguments, else ``config``, else the environment.

    ``CONTEXTSTORE_DATABASE_URL`` (default ``sqlite:///contextstore.db``),
    ``CONTEXTSTORE_REDIS_URL`` (unset: memory backends), ``CONTEXTSTORE_NAMESPACE``
    (default ``default``). Nothing connects until a part is first used.
    """
    base = config or ContextEngineConfig.from_env()
    overrides: dict[str, Any] = {}
    if database_url is not None:
        overrides["database_url"] = database_url
    if redis_url is not None:
        overrides["redis_url"] = redis_url or None
    if namespace is not None:
        overrides["namespace"] = namespace
    return Store(replace(base, **overrides) if overrides else base)
