"""``connect()``: one object that wires every backend from URLs or the environment.

SQL (lessons, metrics) always exists: SQLite in the working directory unless
``CONTEXTSTORE_DATABASE_URL`` says otherwise, migrated to head on first use. Redis is used
for the cache and the adaptive windows when ``CONTEXTSTORE_REDIS_URL`` is set; otherwise both
live in process memory. Everything is built lazily, so ``connect()`` itself does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from contextstore.backends.cache import ContextCache
from contextstore.backends.memory.cache import MemoryContextCache
from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.resources import Closeable
from contextstore.backends.windows import Windows
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.embedding import EmbedFn
from contextstore.core.lessons import LessonSource
from contextstore.core.metrics import MetricsSink
from contextstore.core.retrieval import Retriever

if TYPE_CHECKING:
    import sqlalchemy

    from contextstore.backends.redis.client import FaultPolicy, RedisClient
    from contextstore.backends.sql.knowledge import KnowledgeBase
    from contextstore.backends.sql.metrics import MetricsRepository
    from contextstore.backends.sql.repository import LessonRepository
    from contextstore.backends.sql.run_reads import LessonsAndKnowledge
    from contextstore.engine.sync import ContextEngine

__all__ = ["EngineParts", "Store", "StoreBase", "connect", "store_config"]


class EngineParts(TypedDict, total=False):
    """What ``Store.engine`` lets a caller replace: ``ContextEngine``'s keyword arguments."""

    retriever: Retriever | None
    lessons: LessonSource | None
    cache: ContextCache | None
    windows: Windows | None
    metrics: MetricsSink | None
    analyzer: RuleBasedQueryAnalyzer | None
    embed_fn: EmbedFn | None
    worker: str | None
    timer: Callable[[], float]
    now: Callable[[], datetime]


class KnowledgeOptions(TypedDict):
    """What a knowledge base takes from ``config.retrieval``, sync or async alike."""

    analyzer: str | None
    embedder: str | None
    candidate_limit: int


class StoreBase:
    """What ``Store`` and ``AsyncStore`` read from their config the same way, without I/O."""

    def __init__(self, config: ContextEngineConfig) -> None:
        self.config = config

    @property
    def namespace(self) -> str:
        return self.config.namespace

    @property
    def uses_redis(self) -> bool:
        return self.config.redis_url is not None

    @cached_property
    def fault(self) -> FaultPolicy:
        """One fault policy for the cache and the windows: one outage, one WARNING per interval."""
        from contextstore.backends.redis.client import FaultPolicy

        return FaultPolicy()

    def knowledge_options(self) -> KnowledgeOptions:
        """The knowledge base's analyzer, embedder and candidate limit."""
        retrieval = self.config.retrieval
        # ``embeddings`` is the older spelling of ``embedder="hashing"``.
        embedder = retrieval.embedder or ("hashing" if retrieval.embeddings else None)
        return KnowledgeOptions(
            analyzer=retrieval.analyzer,
            embedder=embedder,
            candidate_limit=retrieval.candidate_limit,
        )


class Store(StoreBase, Closeable):
    """The shared state of one namespace: ``.lessons``, ``.knowledge``, ``.metrics``,
    ``.cache``, ``.windows``."""

    @cached_property
    def sql_engine(self) -> sqlalchemy.Engine:
        from contextstore.backends.sql.database import create_database_engine, migrate

        engine = create_database_engine(self.config.database_url)
        migrate(engine)
        return engine

    @cached_property
    def lessons(self) -> LessonRepository:
        from contextstore.backends.sql.repository import LessonRepository

        return LessonRepository(self.sql_engine, namespace=self.namespace)

    @cached_property
    def knowledge(self) -> KnowledgeBase:
        """The namespace's documents in SQL; the engine's retriever unless one is given."""
        from contextstore.backends.sql.knowledge import KnowledgeBase

        return KnowledgeBase(self.sql_engine, self.namespace, **self.knowledge_options())

    @cached_property
    def run_reads(self) -> LessonsAndKnowledge:
        """``lessons`` and ``knowledge`` read together: an engine's SQL read, one statement."""
        from contextstore.backends.sql.run_reads import LessonsAndKnowledge

        return LessonsAndKnowledge(self.sql_engine, self.knowledge)

    @cached_property
    def metrics(self) -> MetricsRepository:
        """The namespace's metrics rows: every read, prune and write stays inside the
        namespace unless a call passes ``all_namespaces=True``."""
        from contextstore.backends.sql.metrics import MetricsRepository

        return MetricsRepository(self.sql_engine, namespace=self.namespace)

    @cached_property
    def redis(self) -> RedisClient | None:
        """The redis-py client (``Redis`` or ``RedisCluster``), or ``None`` without a URL."""
        if self.config.redis_url is None:
            return None
        from contextstore.backends.redis.client import client_from_url

        return client_from_url(self.config.redis_url)

    @cached_property
    def cache(self) -> ContextCache:
        size, ttl = self.config.cache.max_size, self.config.cache.ttl_seconds
        if self.redis is None:
            return MemoryContextCache(size, ttl)
        from contextstore.backends.redis.cache import RedisContextCache

        return RedisContextCache(
            self.redis, namespace=self.namespace, max_size=size, ttl_seconds=ttl, fault=self.fault
        )

    @cached_property
    def windows(self) -> Windows:
        if self.redis is None:
            return MemoryWindows()
        from contextstore.backends.redis.windows import RedisWindows

        return RedisWindows(self.redis, namespace=self.namespace, fault=self.fault)

    def engine(self, **parts: Unpack[EngineParts]) -> ContextEngine:
        """A ``ContextEngine`` on this store's backends; keyword arguments replace any part.

        The store chooses the engine's ports over the parts: one Redis script per phase when
        the cache and the windows are this store's Redis ones
        (``contextstore.backends.redis.phases``), one SQL statement for the lesson candidates
        and the knowledge generation when both are this store's
        (``contextstore.backends.sql.run_reads``); else each part is called on its own.
        """
        from contextstore.backends.redis.phases import fused_state
        from contextstore.engine.sync import ContextEngine

        chosen: EngineParts = {
            "retriever": self.knowledge,
            "lessons": self.lessons,
            "cache": self.cache if self.config.cache.enabled else None,
            "windows": self.windows,
            "metrics": self.metrics,
        }
        chosen.update(parts)
        joint = chosen["lessons"] is self.lessons and chosen["retriever"] is self.knowledge
        return ContextEngine(
            self.config,
            state=fused_state(chosen["cache"], chosen["windows"]),
            reads=self.run_reads if joint else None,
            **chosen,
        )

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
    return Store(store_config(database_url, redis_url, namespace, config))


def store_config(
    database_url: str | None,
    redis_url: str | None,
    namespace: str | None,
    config: ContextEngineConfig | None,
) -> ContextEngineConfig:
    """``config`` (else the environment's) with the given URLs and namespace; an empty
    ``redis_url`` means no Redis."""
    base = config or ContextEngineConfig.from_env()
    overrides: dict[str, Any] = {}
    if database_url is not None:
        overrides["database_url"] = database_url
    if redis_url is not None:
        overrides["redis_url"] = redis_url or None
    if namespace is not None:
        overrides["namespace"] = namespace
    return replace(base, **overrides) if overrides else base
