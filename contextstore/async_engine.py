"""``AsyncContextEngine``: the same pipeline as ``ContextEngine``, driven on an event loop.

The steps are ``contextstore.pipeline``'s, unchanged; this class only awaits their I/O:

- read phase: the Redis read (entry + adaptive summary, one script call) and the SQL read
  (lesson candidates and knowledge generation: one statement when the lesson source reads
  the retriever's generation, as ``connect_async()`` wires it) run concurrently; on a miss,
  retrieval follows;
- write phase: the Redis write (entry when the guard passed + sample, one script call) and
  the metrics row (one committed statement) run concurrently; both are done, and the row
  durable, when ``run()`` returns.

The runs in flight share their requests: their Redis calls go out as one pipeline, their
metrics rows as one INSERT, and on PostgreSQL their lesson reads as one statement
(``contextstore.batching``), each run still answered on its own.

Nothing here blocks the loop: Redis through ``redis.asyncio``, SQL through SQLAlchemy's
asyncio extension (``contextstore.sql.aio``). In-process parts (a memory cache, memory
windows, ``InMemoryLessons``, ``MemoryMetrics``, ``InMemoryRetriever``) are used directly;
their work is the computation itself. A retriever, lesson source or metrics sink whose
method returns an awaitable is awaited; a retriever with a ``generation()`` method (the
knowledge base) has its generation read in the read phase, as ``ContextEngine`` does.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from contextstore.adaptive.base import AsyncWindows, Windows, WindowSummary
from contextstore.adaptive.memory import AsyncMemoryWindows, MemoryWindows
from contextstore.adaptive.system import AdaptiveLearningSystem
from contextstore.analysis import RuleBasedQueryAnalyzer
from contextstore.cache.base import AsyncContextCache, ContextCache
from contextstore.cache.memory import AsyncMemoryContextCache, MemoryContextCache
from contextstore.config import ContextEngineConfig
from contextstore.embedding import EmbedFn
from contextstore.engine import check_worker
from contextstore.errors import ConfigurationError, ValidationError
from contextstore.guard import ContextGuard
from contextstore.lessons import joint_reads
from contextstore.matching import Lesson, Scope
from contextstore.metrics import QueryMetric
from contextstore.pipeline import (
    ContextResult,
    Pipeline,
    Read,
    ReadReply,
    Retrieve,
    Step,
    Write,
    adrive,
)
from contextstore.redis.phases import read_ops, shared_phases, write_ops
from contextstore.retrieval import InMemoryRetriever

__all__ = ["DEFAULT_CONCURRENCY", "AsyncContextEngine"]

DEFAULT_CONCURRENCY = 4
"""Runs of one engine in flight at once; more wait for a free slot (first come, first
served). Each run in flight holds the loop for about a millisecond at a time, and one turn
of the loop runs every step that became ready meanwhile, so the longest a loop turn can take
grows with the runs in flight: with 4, a burst of 200 gathered runs keeps a 1 ms ticker's
longest wait well under 50 ms even on a loaded machine (with 8 or 16 it passed 50 ms
there). More in flight raise the throughput of a busy engine, as the statements and Redis
calls of the runs in flight go out together (``contextstore.batching``): an application
that needs throughput more than a responsive loop sets ``concurrency`` higher (the
benchmarks use 32)."""


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _async_cache(cache: AsyncContextCache | ContextCache | None) -> AsyncContextCache | None:
    if cache is None or isinstance(cache, AsyncContextCache):
        return cache
    if isinstance(cache, MemoryContextCache):
        return AsyncMemoryContextCache(cache=cache)
    raise ConfigurationError(
        f"cache: {type(cache).__name__} blocks the event loop; give an AsyncContextCache "
        "(AsyncRedisContextCache, AsyncMemoryContextCache)"
    )


def _async_windows(windows: AsyncWindows | Windows | None) -> AsyncWindows:
    if windows is None:
        return AsyncMemoryWindows()
    if isinstance(windows, AsyncWindows):
        return windows
    if isinstance(windows, MemoryWindows):
        return AsyncMemoryWindows(windows)
    raise ConfigurationError(
        f"windows: {type(windows).__name__} blocks the event loop; give AsyncWindows "
        "(AsyncRedisWindows, AsyncMemoryWindows)"
    )


class AsyncContextEngine:
    """``ContextEngine`` for an event loop: ``await engine.run(...)`` → ``ContextResult``.

    Same arguments and defaults as ``ContextEngine`` (an empty ``InMemoryRetriever``, a
    memory cache sized by ``config.cache``, process-local windows, no lessons, no metrics),
    with the async backends: ``cache`` an ``AsyncContextCache``, ``windows`` ``AsyncWindows``
    (memory ones of the sync kind are accepted and wrapped; a blocking Redis one is refused
    with ``ConfigurationError``), ``lessons`` and ``metrics`` anything whose
    ``candidates(scope)`` / ``record(metric)`` returns a value or an awaitable.
    ``concurrency`` (≥ 1, default 4) bounds the runs in flight at once; more wait their
    turn. ``connect_async()`` wires the shared backends.
    """

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        retriever: Any = None,
        lessons: Any = None,
        cache: AsyncContextCache | ContextCache | None = None,
        windows: AsyncWindows | Windows | None = None,
        metrics: Any = None,
        analyzer: RuleBasedQueryAnalyzer | None = None,
        embed_fn: EmbedFn | None = None,
        worker: str | None = None,
        timer: Callable[[], float] = time.perf_counter,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError("concurrency", f"must be an integer ≥ 1, got {concurrency!r}")
        # At most this many runs are in flight; the others wait their turn (see the
        # constant's note). asyncio primitives bind to a loop on first use, not here.
        self._slots = asyncio.Semaphore(concurrency)
        self.config = config or ContextEngineConfig()
        # "is None", not "or": an empty InMemoryRetriever is falsy (it has a length).
        self.retriever = retriever if retriever is not None else InMemoryRetriever(embed_fn)
        self.lessons = lessons
        # A lesson source that reads the retriever's generation with the candidates: one
        # SQL read per run instead of two (``connect_async()`` wires one).
        self._joint = joint_reads(lessons, self.retriever)
        if cache is None and self.config.cache.enabled:
            cache = MemoryContextCache(self.config.cache.max_size, self.config.cache.ttl_seconds)
        self.cache = _async_cache(cache)
        self.windows = _async_windows(windows)
        self.metrics = metrics
        self.analyzer = analyzer or RuleBasedQueryAnalyzer(self.config.analyzer)
        self.guard = ContextGuard(self.config, embed_fn)
        self.worker = check_worker(worker)
        # The adaptive rules only (budget, sample, auto-tune); the windows are awaited here.
        memory = self.windows.windows if isinstance(self.windows, AsyncMemoryWindows) else None
        self._adaptive = AdaptiveLearningSystem(self.config, memory)
        self.pipeline = Pipeline(
            self.config,
            self.analyzer,
            self.guard,
            self._adaptive,
            worker=self.worker,
            caching=self.cache is not None,
            timer=timer,
            now=now,
        )
        self._phases = shared_phases(self.cache, self.windows)

    @property
    def auto_tune_runs(self) -> int:
        """How many times this engine's runs triggered the adaptive review."""
        return self._adaptive.auto_tune_runs

    async def run(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
        override_budget: int | None = None,
    ) -> ContextResult:
        """``ContextEngine.run``, awaited: the same steps, result and errors.

        Redis faults never raise (the cache misses, the windows fall back to memory, as in
        SPEC §6); a bad argument raises ``ValidationError`` before any I/O.
        """
        steps = self.pipeline.run(query, scope, filters, override_budget)
        async with self._slots:
            return await adrive(steps, self._perform)

    async def run_multi(
        self,
        queries: Sequence[str],
        global_budget: int,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[ContextResult]:
        """``ContextEngine.run_multi``, awaited; the runs go concurrently, results in order."""
        budgets = self.pipeline.budgets(queries, global_budget)
        return list(
            await asyncio.gather(
                *(
                    self.run(query, scope=scope, filters=filters, override_budget=budget)
                    for query, budget in zip(queries, budgets, strict=True)
                )
            )
        )

    async def performance_report(self) -> dict[str, Any]:
        """``AdaptiveLearningSystem.get_performance_report`` of this engine's windows."""
        summary = await self.windows.summary()
        return {
            "total_queries": summary.total_queries,
            "avg_response_ms": summary.avg_response_ms,
            "avg_context_length": summary.avg_context_length,
            "avg_chunk_count": summary.avg_chunk_count,
            "guard_failure_rate": summary.guard_failure_rate,
            "samples": summary.samples,
        }

    # -- the I/O of each step ---------------------------------------------------------------

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Read):
            return await self._read(step)
        if isinstance(step, Retrieve):
            retrieved = self.retriever.retrieve(step.query, step.analysis, step.top_k, step.filters)
            return await _resolved(retrieved)
        return await self._write(step)

    async def _read(self, read: Read) -> ReadReply:
        # The Redis read goes first, as a task of its own; the SQL reads are awaited here
        # meanwhile (one task less than a gather of all three, on every run).
        state = asyncio.ensure_future(self._read_state(read))
        try:
            if self._joint is not None:
                joint = await _resolved(self._joint.candidates_with_generation(read.scope))
                cached, summary = await state
                return ReadReply(cached, summary, joint[0], joint[1])
            candidates: list[Lesson] = []
            if self.lessons is not None and (read.scope.entity_ids or read.scope.tags):
                candidates = await self._candidates(read.scope)
            generation: int | None = None
            read_generation = getattr(self.retriever, "generation", None)
            if callable(read_generation):
                generation = await _resolved(read_generation())
        except BaseException:
            state.cancel()
            raise
        cached, summary = await state
        return ReadReply(cached, summary, candidates, generation)

    async def _read_state(self, read: Read) -> tuple[str | None, WindowSummary | None]:
        cache = self.cache
        if self._phases and (read.cache_key is not None or read.want_summary):
            shared: Any = cache  # an AsyncRedisContextCache: shared_phases checked it
            ops = read_ops(shared, self.windows, read.cache_key, read.want_summary)  # type: ignore[arg-type]
            found: tuple[str | None, WindowSummary | None] = await shared.driver.run(ops)
            return found
        cached = None
        if read.cache_key is not None and cache is not None:
            cached = await cache.get(read.cache_key)
        summary = await self.windows.summary() if read.want_summary else None
        return cached, summary

    async def _candidates(self, scope: Scope) -> list[Lesson]:
        candidates: list[Lesson] = await _resolved(self.lessons.candidates(scope))
        return candidates

    async def _write(self, write: Write) -> WindowSummary | None:
        if self.metrics is None:
            return await self._write_state(write)
        state = asyncio.ensure_future(self._write_state(write))
        try:
            await self._record(write.metric)
        finally:
            # Redis faults never raise (the fault policy answers them), so this completes
            # even when the metrics row could not be written, and its result is consumed.
            summary = await state
        return summary

    async def _write_state(self, write: Write) -> WindowSummary | None:
        cache = self.cache
        anything = write.context is not None or write.sample is not None
        if self._phases and write.cache_key is not None and anything:
            shared: Any = cache  # an AsyncRedisContextCache: shared_phases checked it
            ops = write_ops(shared, self.windows, write.cache_key, write.context, write.sample)  # type: ignore[arg-type]
            recorded: WindowSummary | None = await shared.driver.run(ops)
            return recorded
        if write.context is not None and write.cache_key is not None and cache is not None:
            await cache.put(write.cache_key, write.context)
        if write.sample is None:
            return None
        return await self.windows.record(write.sample)

    async def _record(self, metric: QueryMetric) -> None:
        await _resolved(self.metrics.record(metric))
