"""The stores behind the service: one per namespace a key names, opened on first use.

A key's namespace selects the store, and through it the cache, the adaptive windows and the
metrics rows its runs touch; no request can name another namespace. Lessons belong to the
database and are shared by its namespaces (SPEC §11), so the lesson administration and the
metrics reports go through one store whose repositories filter by the caller's namespace.

Runs and searches go through the async engine and knowledge base of the caller's namespace
(``connect_async``), on the event loop. Lesson administration, document administration,
metrics reports and the readiness checks call the synchronous repositories in a worker
thread, so the event loop never waits on them either.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool

from contextstore.async_engine import AsyncContextEngine
from contextstore.async_store import AsyncStore, connect_async
from contextstore.compose import Chunk
from contextstore.engine import ContextResult
from contextstore.matching import Scope
from contextstore.service.settings import ServiceSettings
from contextstore.service.telemetry import Telemetry
from contextstore.sql.knowledge import KnowledgeBase
from contextstore.sql.metrics import MetricsRepository
from contextstore.sql.repository import LessonRepository
from contextstore.store import Store, connect

T = TypeVar("T")


def worker_name() -> str:
    """How this server process signs its metrics rows (``serve:<host>:<pid>``)."""
    return f"serve:{socket.gethostname()}:{os.getpid()}"[:128]


@dataclass
class _Namespace:
    store: AsyncStore
    engine: AsyncContextEngine
    faults_seen: int = 0
    documents: Store | None = None


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
        self._shared = connect(config=settings.store)
        self._namespaces: dict[str, _Namespace] = {}
        self._opening = threading.Lock()

    # -- repositories (database-wide) ---------------------------------------------------

    @property
    def lessons(self) -> LessonRepository:
        return self._shared.lessons

    @property
    def metrics(self) -> MetricsRepository:
        return self._shared.metrics

    async def call(self, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread (blocking repository calls)."""
        return await run_in_threadpool(work)

    def documents(self, namespace: str) -> KnowledgeBase:
        """The documents of ``namespace`` to administer (blocking: call it in a thread)."""
        slot = self._namespace(namespace)
        with self._opening:
            if slot.documents is None:
                slot.documents = connect(config=slot.store.config)
        return slot.documents.knowledge

    # -- runs ---------------------------------------------------------------------------

    def _namespace(self, namespace: str) -> _Namespace:
        slot = self._namespaces.get(namespace)
        if slot is None:
            # No I/O here: the store connects, and migrates, on its first use.
            store = connect_async(config=replace(self.settings.store, namespace=namespace))
            slot = _Namespace(store, store.engine(worker=self.worker))
            self._namespaces[namespace] = slot
        return slot

    async def run(
        self,
        namespace: str,
        query: str,
        *,
        scope: Scope | None,
        filters: Mapping[str, Any] | None,
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
        self, namespace: str, query: str, top_k: int, filters: Mapping[str, Any] | None
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
        sql, redis = await asyncio.gather(
            run_in_threadpool(self._check_sql), run_in_threadpool(self._check_redis)
        )
        return Readiness(sql=sql, redis=redis)

    def _check_sql(self) -> str:
        try:
            with self._shared.sql_engine.connect() as connection:
                connection.execute(sa.text("SELECT 1"))
        except Exception:
            return "down"
        return "ok"

    def _check_redis(self) -> str:
        if not self._shared.uses_redis:
            return "not configured"
        try:
            self._shared.redis.ping()
        except Exception:
            return "down"
        return "ok"

    async def aclose(self) -> None:
        """Close every store (the lifespan's shutdown, once requests in flight are done)."""
        slots = list(self._namespaces.values())
        self._namespaces.clear()
        for slot in slots:
            await slot.store.aclose()
            if slot.documents is not None:
                await run_in_threadpool(slot.documents.close)
        await run_in_threadpool(self._shared.close)
