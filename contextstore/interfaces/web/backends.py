"""The stores behind the service and the console: one ``AsyncStore`` per namespace.

A key's namespace selects the store, and through it the cache, the adaptive windows, the
documents and the metrics rows it reads and writes (each store's metrics are bound to its
namespace; only an owner's request asks for every namespace). Lessons belong to the
database and are shared by its namespaces, so the lesson administration and the readiness
checks go through the store of the configured namespace.

Everything runs on the event loop: runs and searches on the async engine and knowledge base,
the administration's blocking repositories through the store's ``run_sync`` (every statement
awaited on the asyncio driver). Stores open on first use and close with ``aclose``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa

from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.compose import Chunk
from contextstore.core.matching import Scope
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.pipeline import ContextResult
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry
from contextstore.store.aio import AsyncStore, connect_async

T = TypeVar("T")


def worker_name() -> str:
    """How this server process signs its metrics rows (``serve:<host>:<pid>``)."""
    return f"serve:{socket.gethostname()}:{os.getpid()}"[:128]


@dataclass
class _Namespace:
    store: AsyncStore
    engine: AsyncContextEngine
    faults_seen: int = 0


@dataclass(frozen=True)
class Readiness:
    """``sql`` and ``redis`` are ``ok``, ``down`` or (Redis only) ``not configured``."""

    sql: str
    redis: str

    @property
    def ready(self) -> bool:
        return self.sql == "ok"

    @property
    def status(self) -> str:
        if not self.ready:
            return "unavailable"
        return "degraded" if self.redis == "down" else "ok"


class Backends:
    """Opens, caches and closes the stores; runs engine calls and repository calls."""

    def __init__(self, settings: ServiceSettings, telemetry: Telemetry) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.worker = worker_name()
        self._namespaces: dict[str, _Namespace] = {}

    # -- repositories (database-wide) ---------------------------------------------------

    @property
    def home(self) -> AsyncStore:
        """The store of the configured namespace: the database-wide repositories' own."""
        return self._namespace(self.settings.store.namespace).store

    @property
    def lessons(self) -> LessonRepository:
        """The lesson repository, to call inside ``call``."""
        return self.home.blocking_lessons

    def metrics(self, namespace: str) -> MetricsRepository:
        """The metrics rows of ``namespace`` (bound to it), to call inside ``call``; on the
        home store's connections, as the lessons are."""
        return self.home.blocking_metrics_of(namespace)

    def documents(self, namespace: str) -> KnowledgeBase:
        """The documents of ``namespace`` to administer, to call inside ``call``."""
        return self._namespace(namespace).store.blocking_knowledge

    async def call(self, work: Callable[[], T]) -> T:
        """``work()``, which calls ``lessons``, ``metrics(…)`` or ``documents(…)``, on the event
        loop (``AsyncStore.run_sync``): nothing blocks it."""
        return await self.home.run_sync(work)

    # -- runs ---------------------------------------------------------------------------

    def _namespace(self, namespace: str) -> _Namespace:
        slot = self._namespaces.get(namespace)
        if slot is None:
            # No I/O here: the store connects, and migrates, on its first use. Every other
            # namespace borrows the home store's connections: one pool for all of them.
            home = self.settings.store.namespace
            if namespace == home:
                store = connect_async(config=self.settings.store)
            else:
                store = self._namespace(home).store.for_namespace(namespace)
            slot = _Namespace(store, store.engine(worker=self.worker))
            self._namespaces[namespace] = slot
        return slot

    async def run(
        self,
        namespace: str,
        query: str,
        *,
        scope: Scope | None,
        filters: Mapping[str, object] | None,
        override_budget: int | None,
    ) -> ContextResult:
        """One run of the async engine in ``namespace``, counted in the telemetry."""
        slot = self._namespace(namespace)
        started = time.perf_counter()
        try:
            result = await slot.engine.run(
                query, scope=scope, filters=filters, override_budget=override_budget
            )
        finally:
            self._count_faults(namespace)
        self.telemetry.observe_run(namespace, time.perf_counter() - started, result.cache_hit)
        return result

    async def search(
        self, namespace: str, query: str, top_k: int, filters: Mapping[str, object] | None
    ) -> list[Chunk]:
        knowledge = self._namespace(namespace).store.knowledge
        return await knowledge.search(query, top_k, filters)

    def _count_faults(self, namespace: str) -> None:
        slot = self._namespaces.get(namespace)
        if slot is None or not slot.store.uses_redis:
            return
        errors = slot.store.fault.errors
        self.telemetry.add_redis_faults(namespace, errors - slot.faults_seen)
        slot.faults_seen = errors

    # -- readiness ----------------------------------------------------------------------

    async def readiness(self) -> Readiness:
        """SQL must answer; Redis down only degrades (runs fall back to process memory)."""
        sql, redis = await asyncio.gather(self._check_sql(), self._check_redis())
        return Readiness(sql=sql, redis=redis)

    async def _check_sql(self) -> str:
        store = self.home
        try:
            await store.ready()
            async with store.sql_engine.connect() as connection:
                await connection.execute(sa.text("SELECT 1"))
        except Exception:
            return "down"
        return "ok"

    async def _check_redis(self) -> str:
        client = self.home.redis
        if client is None:
            return "not configured"
        try:
            await client.ping()
        except Exception:
            return "down"
        return "ok"

    async def aclose(self) -> None:
        """Close every store (the lifespan's shutdown, once requests in flight are done)."""
        slots = list(self._namespaces.values())
        self._namespaces.clear()
        for slot in slots:
            await slot.store.aclose()
