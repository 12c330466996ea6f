"""``AsyncContextEngine``: the same pipeline as ``ContextEngine``, driven on an event loop.

The steps are ``contextstore.engine.pipeline``'s, unchanged; this class only awaits their I/O
through the two ports (``contextstore.engine.ports``):

- read phase: the run state (entry + adaptive summary) and the run reads (lesson
  candidates + knowledge generation) run concurrently; on a miss, retrieval follows;
- write phase: the run state (entry when the guard passed + sample) and the metrics row run
  concurrently; both are done, and the row durable, when ``run()`` returns.

In-process parts (a memory cache, memory windows, ``InMemoryLessons``, ``MemoryMetrics``,
``InMemoryRetriever``) are used directly; their work is the computation itself. A part's
method may be sync or ``async``: an awaitable it returns is awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from contextstore.backends.cache import AsyncContextCache, ContextCache
from contextstore.backends.memory.cache import AsyncMemoryContextCache, MemoryContextCache
from contextstore.backends.memory.windows import AsyncMemoryWindows, MemoryWindows
from contextstore.backends.windows import AsyncWindows, Windows, WindowSummary
from contextstore.config import DEFAULT_CONCURRENCY, ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.compose import Chunk
from contextstore.core.embedding import EmbedFn
from contextstore.core.lessons import AsyncLessonSource, LessonSource
from contextstore.core.matching import Scope
from contextstore.core.metrics import AsyncMetricsSink, MetricsSink
from contextstore.core.retrieval import AsyncRetriever, InMemoryRetriever, Retriever
from contextstore.engine.adaptive import (
    AdaptiveLearningSystem,
    PerformanceReport,
    performance_report,
)
from contextstore.engine.pipeline import (
    ContextResult,
    Read,
    ReadReply,
    Retrieve,
    Step,
    Write,
    adrive,
)
from contextstore.engine.ports import AsyncRunReads, AsyncRunState
from contextstore.engine.separate import AsyncSeparateRunReads, AsyncSeparateRunState, resolved
from contextstore.engine.sync import EngineBase, default_cache
from contextstore.engine.tracing import ended
from contextstore.errors import ConfigurationError, ValidationError

__all__ = ["DEFAULT_CONCURRENCY", "AsyncContextEngine"]

# A query's analysis is linear in its text (about 30 µs a word: 0.6 s for 20,000 words). A
# longer query is analysed in a worker thread, so a pasted log never holds the event loop; a
# shorter one costs less than the hop.
ANALYSED_ON_THE_LOOP_CHARS = 2_000
# One analysing thread per process: the loop's thread shares the GIL with one thread at a
# time, so its turns come every few milliseconds however many long queries arrive at once.
_ANALYSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextstore-analyse")


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


class AsyncContextEngine(EngineBase):
    """``ContextEngine`` for an event loop: ``await engine.run(...)`` → ``ContextResult``.

    Same arguments and defaults as ``ContextEngine`` (an empty ``InMemoryRetriever``, a
    memory cache sized by ``config.cache``, process-local windows, no lessons, no metrics),
    with the async backends: ``cache`` an ``AsyncContextCache``, ``windows`` ``AsyncWindows``
    (memory ones of the sync kind are accepted and wrapped; a blocking Redis one is refused
    with ``ConfigurationError``); ``retriever``, ``lessons`` and ``metrics`` either sync or
    async. ``state`` and ``reads`` are the ports, as for ``ContextEngine``; by default
    ``AsyncSeparateRunState`` and ``AsyncSeparateRunReads`` over the parts.
    ``concurrency`` (≥ 1, default ``config.concurrency``: 4) bounds the runs in flight at
    once; more wait their turn. ``connect_async()`` wires the shared backends.
    """

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        retriever: AsyncRetriever | Retriever | None = None,
        lessons: AsyncLessonSource | LessonSource | None = None,
        cache: AsyncContextCache | ContextCache | None = None,
        windows: AsyncWindows | Windows | None = None,
        metrics: AsyncMetricsSink | MetricsSink | None = None,
        analyzer: RuleBasedQueryAnalyzer | None = None,
        embed_fn: EmbedFn | None = None,
        worker: str | None = None,
        timer: Callable[[], float] = time.perf_counter,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        concurrency: int | None = None,
        state: AsyncRunState | None = None,
        reads: AsyncRunReads | None = None,
    ) -> None:
        self.config = config or ContextEngineConfig()
        if concurrency is None:
            concurrency = self.config.concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError("concurrency", f"must be an integer ≥ 1, got {concurrency!r}")
        # At most this many runs are in flight; the others wait their turn (see the
        # constant's note). asyncio primitives bind to a loop on first use, not here.
        self._slots = asyncio.Semaphore(concurrency)
        # "is None", not "or": an empty InMemoryRetriever is falsy (it has a length).
        self.retriever: AsyncRetriever | Retriever = (
            retriever if retriever is not None else InMemoryRetriever(embed_fn)
        )
        self.lessons = lessons
        self.cache = _async_cache(default_cache(self.config, cache))
        self.windows = _async_windows(windows)
        self.metrics = metrics
        if state is None:
            state = AsyncSeparateRunState(self.cache, self.windows)
        self.state: AsyncRunState = state
        if reads is None:
            reads = AsyncSeparateRunReads(lessons, self.retriever)
        self.reads: AsyncRunReads = reads
        # The adaptive rules only (budget, sample, auto-tune); the windows are awaited here.
        memory = self.windows.windows if isinstance(self.windows, AsyncMemoryWindows) else None
        self._adaptive = AdaptiveLearningSystem(self.config, memory)
        self._assemble(
            self._adaptive,
            analyzer=analyzer,
            embed_fn=embed_fn,
            worker=worker,
            caching=self.cache is not None,
            timer=timer,
            now=now,
        )

    @property
    def auto_tune_runs(self) -> int:
        """How many times this engine's runs triggered the adaptive review."""
        return self._adaptive.auto_tune_runs

    async def run(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, object] | None = None,
        override_budget: int | None = None,
    ) -> ContextResult:
        """``ContextEngine.run``, awaited: the same steps, result and errors.

        Redis faults never raise (the cache misses, the windows fall back to memory); a bad
        argument raises ``ValidationError`` before any I/O.
        """
        analysis = None
        if isinstance(query, str) and len(query) > ANALYSED_ON_THE_LOOP_CHARS:
            loop = asyncio.get_running_loop()
            analysis = await loop.run_in_executor(_ANALYSER, self.analyzer.analyze, query)
        steps = self.pipeline.run(query, scope, filters, override_budget, analysis)
        async with self._slots:
            if self._tracer is None:
                return await adrive(steps, self._perform)
            with self._tracer.run(query) as span:
                result = await adrive(steps, self._traced_perform)
                self._tracer.finish(span, result)
            return result

    async def run_multi(
        self,
        queries: Sequence[str],
        global_budget: int,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, object] | None = None,
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

    async def performance_report(self) -> PerformanceReport:
        """``AdaptiveLearningSystem.get_performance_report`` of this engine's windows."""
        return performance_report(await self.windows.summary())

    # -- the I/O of each step ---------------------------------------------------------------

    async def _perform(self, step: Step) -> ReadReply | list[Chunk] | WindowSummary | None:
        if isinstance(step, Read):
            return await self._read(step)
        if isinstance(step, Retrieve):
            retrieved = self.retriever.retrieve(step.query, step.analysis, step.top_k, step.filters)
            return await resolved(retrieved)
        return await self._write(step)

    async def _traced_perform(self, step: Step) -> ReadReply | list[Chunk] | WindowSummary | None:
        """``_perform`` with a span for each phase (``contextstore.engine.tracing``)."""
        assert self._tracer is not None
        if isinstance(step, Read):
            # The run state and the run reads go concurrently: the cache read's span is
            # ended when its task is, and is no parent of the lessons' span.
            cache_span = self._tracer.start("cache read")
            state = asyncio.ensure_future(
                ended(cache_span, self.state.read(step.cache_key, step.want_summary))
            )
            try:
                with self._tracer.phase("lessons") as span:
                    candidates, generation = await self.reads.candidates_with_generation(step.scope)
                    span.set_attribute("contextstore.lessons.candidates", len(candidates))
            except BaseException:
                state.cancel()
                raise
            cached, summary = await state
            return ReadReply(cached, summary, candidates, generation)
        if isinstance(step, Retrieve):
            with self._tracer.phase("retrieval") as span:
                chunks: list[Chunk] = await resolved(
                    self.retriever.retrieve(step.query, step.analysis, step.top_k, step.filters)
                )
                span.set_attribute("contextstore.chunks", len(chunks))
                return chunks
        with self._tracer.phase("write"):
            return await self._write(step)

    async def _read(self, read: Read) -> ReadReply:
        # The run state goes first, as a task of its own; the run reads are awaited here
        # meanwhile (one task less than a gather of both, on every run).
        state = asyncio.ensure_future(self.state.read(read.cache_key, read.want_summary))
        try:
            candidates, generation = await self.reads.candidates_with_generation(read.scope)
        except BaseException:
            state.cancel()
            raise
        cached, summary = await state
        return ReadReply(cached, summary, candidates, generation)

    async def _write(self, write: Write) -> WindowSummary | None:
        recorded = self.state.write(write.cache_key, write.context, write.sample)
        if self.metrics is None:
            return await recorded
        state = asyncio.ensure_future(recorded)
        try:
            await resolved(self.metrics.record(write.metric))
        finally:
            # Redis faults never raise (the fault policy answers them), so this completes
            # even when the metrics row could not be written, and its result is consumed.
            summary = await state
        return summary
