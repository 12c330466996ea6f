"""``ContextEngine``: the pipeline (``contextstore.engine.pipeline``) driven with blocking I/O.

A run is a read phase, pure computation and a write phase. This class only performs the
phases' I/O, one after the other, through the two ports (``contextstore.engine.ports``):

- read: the run state (the cache entry and the adaptive summary), then the run reads (the
  lesson candidates and the knowledge generation); on a miss, retrieval;
- write: the run state (the entry, when the guard passed, and the sample), then the metrics
  row, durable before ``run()`` returns.

Lessons are never cached: they are matched fresh on every run, so an administrator's change
in SQL takes effect on the next call. The cache key covers the query, the filters, the scope,
the namespace and any override budget, so two scopes or two tenants never share an entry.
``AsyncContextEngine`` (``contextstore.engine.aio``) drives the same pipeline on an event loop.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from contextstore.backends.cache import ContextCache
from contextstore.backends.memory.cache import MemoryContextCache
from contextstore.backends.windows import Windows, WindowSummary
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.compose import Chunk
from contextstore.core.embedding import EmbedFn
from contextstore.core.guard import ContextGuard
from contextstore.core.lessons import LessonSource
from contextstore.core.matching import Scope
from contextstore.core.metrics import MetricsSink
from contextstore.core.retrieval import InMemoryRetriever, Retriever
from contextstore.engine.adaptive import AdaptiveLearningSystem
from contextstore.engine.pipeline import (
    ContextResult,
    Pipeline,
    Read,
    ReadReply,
    Retrieve,
    Step,
    Write,
    drive,
)
from contextstore.engine.ports import RunReads, RunState
from contextstore.engine.separate import SeparateRunReads, SeparateRunState
from contextstore.engine.tracing import RunTracer, TracedPipeline
from contextstore.errors import ValidationError

__all__ = ["MAX_WORKER_LENGTH", "ContextEngine", "ContextResult", "default_worker_name"]

CacheT = TypeVar("CacheT")

# The width of query_metrics.worker.
MAX_WORKER_LENGTH = 128


def build_pipeline(
    config: ContextEngineConfig,
    analyzer: RuleBasedQueryAnalyzer,
    guard: ContextGuard,
    adaptive: AdaptiveLearningSystem,
    **options: Any,
) -> Pipeline:
    """The engine's pipeline: the plain one, or with tracing on, one whose phases are spans
    (``contextstore.engine.tracing``, which imports OpenTelemetry only then)."""
    if not config.tracing.enabled:
        return Pipeline(config, analyzer, guard, adaptive, **options)
    tracer = RunTracer(config)
    return TracedPipeline(config, analyzer, guard, adaptive, tracer=tracer, **options)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_worker(worker: str | None) -> str:
    """``worker``, or this process's default name; ``ValidationError`` when too long."""
    worker = worker or default_worker_name()
    if len(worker) > MAX_WORKER_LENGTH:
        raise ValidationError("worker", f"must be at most {MAX_WORKER_LENGTH} characters")
    return worker


def default_cache(
    config: ContextEngineConfig, cache: CacheT | None
) -> CacheT | MemoryContextCache | None:
    """``cache``, else a ``MemoryContextCache`` sized by ``config.cache`` when it is enabled."""
    if cache is None and config.cache.enabled:
        return MemoryContextCache(config.cache.max_size, config.cache.ttl_seconds)
    return cache


class EngineBase:
    """What both engines build the same way from their arguments: the analyzer, the guard,
    the worker's name and the pipeline (with its tracer when tracing is on)."""

    config: ContextEngineConfig

    def _assemble(
        self,
        adaptive: AdaptiveLearningSystem,
        *,
        analyzer: RuleBasedQueryAnalyzer | None,
        embed_fn: EmbedFn | None,
        worker: str | None,
        caching: bool,
        timer: Callable[[], float],
        now: Callable[[], datetime],
    ) -> None:
        self.analyzer = analyzer or RuleBasedQueryAnalyzer(self.config.analyzer)
        self.guard = ContextGuard(self.config, embed_fn)
        self.worker = check_worker(worker)
        self.pipeline = build_pipeline(
            self.config,
            self.analyzer,
            self.guard,
            adaptive,
            worker=self.worker,
            caching=caching,
            timer=timer,
            now=now,
        )
        self._tracer = self.pipeline.tracer if isinstance(self.pipeline, TracedPipeline) else None


class ContextEngine(EngineBase):
    """Builds one agent's context per call; every collaborator is injectable.

    Defaults: an empty ``InMemoryRetriever``, a ``MemoryContextCache`` sized by
    ``config.cache`` (none when ``config.cache.enabled`` is False), process-local adaptive
    windows, no lessons and no durable metrics. ``connect()`` wires the shared SQL and Redis
    backends instead.

    ``state`` and ``reads`` are the ports a run's I/O goes through; by default each backend
    is called on its own (``SeparateRunState(cache, windows)``, ``SeparateRunReads(lessons,
    retriever)``). A store passes faster implementations over the same backends; given
    ports must serve exactly the ``cache``, ``windows``, ``lessons`` and ``retriever`` given
    beside them.
    """

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        retriever: Retriever | None = None,
        lessons: LessonSource | None = None,
        cache: ContextCache | None = None,
        windows: Windows | None = None,
        metrics: MetricsSink | None = None,
        analyzer: RuleBasedQueryAnalyzer | None = None,
        embed_fn: EmbedFn | None = None,
        worker: str | None = None,
        timer: Callable[[], float] = time.perf_counter,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        state: RunState | None = None,
        reads: RunReads | None = None,
    ) -> None:
        self.config = config or ContextEngineConfig()
        # "is None", not "or": an empty InMemoryRetriever is falsy (it has a length).
        self.retriever: Retriever = (
            retriever if retriever is not None else InMemoryRetriever(embed_fn)
        )
        self.lessons = lessons
        cache = default_cache(self.config, cache)
        self.cache = cache
        self.adaptive = AdaptiveLearningSystem(self.config, windows)
        self.metrics = metrics
        if state is None:
            state = SeparateRunState(cache, self.adaptive.windows)
        self.state: RunState = state
        if reads is None:
            reads = SeparateRunReads(lessons, self.retriever)
        self.reads: RunReads = reads
        self._assemble(
            self.adaptive,
            analyzer=analyzer,
            embed_fn=embed_fn,
            worker=worker,
            caching=cache is not None,
            timer=timer,
            now=now,
        )

    def run(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, object] | None = None,
        override_budget: int | None = None,
    ) -> ContextResult:
        """Build the context for ``query`` as seen from ``scope``.

        ``override_budget`` (characters, ≥ 1) replaces the adaptive suggestion. Redis faults
        never raise here (the cache misses, the windows fall back to memory); a bad argument
        raises ``ValidationError`` naming it before anything runs or is recorded.
        """
        steps = self.pipeline.run(query, scope, filters, override_budget)
        if self._tracer is None:
            return drive(steps, self._perform)
        with self._tracer.run(query) as span:
            result = drive(steps, self._traced_perform)
            self._tracer.finish(span, result)
        return result

    def run_multi(
        self,
        queries: Sequence[str],
        global_budget: int,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, object] | None = None,
    ) -> list[ContextResult]:
        """Run several queries sharing ``global_budget`` characters, split by complexity.

        Harder queries get more (weights LOW 1, MEDIUM 1.5, HIGH 2.5); every query gets at
        least 1. An empty list returns ``[]``.
        """
        budgets = self.pipeline.budgets(queries, global_budget)
        return [
            self.run(query, scope=scope, filters=filters, override_budget=budget)
            for query, budget in zip(queries, budgets, strict=True)
        ]

    # -- the I/O of each step ---------------------------------------------------------------

    def _perform(self, step: Step) -> ReadReply | list[Chunk] | WindowSummary | None:
        if isinstance(step, Read):
            cached, summary = self.state.read(step.cache_key, step.want_summary)
            candidates, generation = self.reads.candidates_with_generation(step.scope)
            return ReadReply(cached, summary, candidates, generation)
        if isinstance(step, Retrieve):
            return self.retriever.retrieve(step.query, step.analysis, step.top_k, step.filters)
        return self._write(step)

    def _traced_perform(self, step: Step) -> ReadReply | list[Chunk] | WindowSummary | None:
        """``_perform`` with a span for each phase (``contextstore.engine.tracing``)."""
        assert self._tracer is not None
        phase = self._tracer.phase
        if isinstance(step, Read):
            with phase("cache read"):
                cached, summary = self.state.read(step.cache_key, step.want_summary)
            with phase("lessons") as span:
                candidates, generation = self.reads.candidates_with_generation(step.scope)
                span.set_attribute("contextstore.lessons.candidates", len(candidates))
            return ReadReply(cached, summary, candidates, generation)
        if isinstance(step, Retrieve):
            with phase("retrieval") as span:
                chunks = self.retriever.retrieve(
                    step.query, step.analysis, step.top_k, step.filters
                )
                span.set_attribute("contextstore.chunks", len(chunks))
                return chunks
        with phase("write"):
            return self._write(step)

    def _write(self, write: Write) -> WindowSummary | None:
        summary = self.state.write(write.cache_key, write.context, write.sample)
        if self.metrics is not None:
            self.metrics.record(write.metric)
        return summary
