"""``ContextEngine``: the pipeline (``contextstore.pipeline``) driven with blocking I/O.

A run is a read phase, pure computation and a write phase (SPEC §3, §8). This class only
performs the phases' I/O, one after the other:

- read: the cache entry and the adaptive summary (one Redis call when both live in Redis,
  see ``contextstore.redis.phases``), then the lesson candidates and the knowledge
  generation (one SQL statement for both when the lesson source reads the retriever's
  generation, as ``connect()`` wires it; no BEGIN/COMMIT round trips); on a miss, retrieval;
- write: the entry (when the guard passed) and the sample (one Redis call), then the
  metrics row (one committed statement), durable before ``run()`` returns.

Lessons are never cached: they are matched fresh on every run, so an administrator's change
in SQL takes effect on the next call. The cache key covers the query, the filters, the scope,
the namespace and any override budget, so two scopes or two tenants never share an entry.
``AsyncContextEngine`` (``contextstore.aio``) drives the same pipeline on an event loop.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from contextstore.adaptive.base import Windows, WindowSummary
from contextstore.adaptive.system import AdaptiveLearningSystem
from contextstore.analysis import RuleBasedQueryAnalyzer
from contextstore.cache.base import ContextCache
from contextstore.cache.memory import MemoryContextCache
from contextstore.config import ContextEngineConfig
from contextstore.embedding import EmbedFn
from contextstore.errors import ValidationError
from contextstore.guard import ContextGuard
from contextstore.lessons import LessonSource, joint_reads
from contextstore.matching import Scope
from contextstore.metrics import MetricsSink
from contextstore.pipeline import (
    ContextResult,
    Pipeline,
    Read,
    ReadReply,
    Retrieve,
    Step,
    Write,
    drive,
)
from contextstore.retrieval import InMemoryRetriever, Retriever, VersionedRetriever

__all__ = ["MAX_WORKER_LENGTH", "ContextEngine", "ContextResult", "default_worker_name"]

# The width of query_metrics.worker.
MAX_WORKER_LENGTH = 128


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_worker(worker: str | None) -> str:
    """``worker``, or this process's default name; ``ValidationError`` when too long."""
    worker = worker or default_worker_name()
    if len(worker) > MAX_WORKER_LENGTH:
        raise ValidationError("worker", f"must be at most {MAX_WORKER_LENGTH} characters")
    return worker


class ContextEngine:
    """Builds one agent's context per call; every collaborator is injectable.

    Defaults: an empty ``InMemoryRetriever``, a ``MemoryContextCache`` sized by
    ``config.cache`` (none when ``config.cache.enabled`` is False), process-local adaptive
    windows, no lessons and no durable metrics. ``connect()`` wires the shared SQL and Redis
    backends instead.
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
    ) -> None:
        self.config = config or ContextEngineConfig()
        # "is None", not "or": an empty InMemoryRetriever is falsy (it has a length).
        self.retriever: Retriever = (
            retriever if retriever is not None else InMemoryRetriever(embed_fn)
        )
        self.lessons = lessons
        # A lesson source that reads the retriever's generation with the candidates: one
        # SQL read per run instead of two (``connect()`` wires one).
        self._joint = joint_reads(lessons, self.retriever)
        if cache is None and self.config.cache.enabled:
            cache = MemoryContextCache(self.config.cache.max_size, self.config.cache.ttl_seconds)
        self.cache = cache
        self.adaptive = AdaptiveLearningSystem(self.config, windows)
        self.metrics = metrics
        self.analyzer = analyzer or RuleBasedQueryAnalyzer(self.config.analyzer)
        self.guard = ContextGuard(self.config, embed_fn)
        self.worker = check_worker(worker)
        self.pipeline = Pipeline(
            self.config,
            self.analyzer,
            self.guard,
            self.adaptive,
            worker=self.worker,
            caching=cache is not None,
            timer=timer,
            now=now,
        )
        # Bound once: whether the cache and windows can share the phase scripts.
        from contextstore.redis.phases import shared_phases

        self._phases = shared_phases(cache, self.adaptive.windows)

    def run(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
        override_budget: int | None = None,
    ) -> ContextResult:
        """Build the context for ``query`` as seen from ``scope``.

        ``override_budget`` (characters, ≥ 1) replaces the adaptive suggestion. Redis faults
        never raise here (the cache misses, the windows fall back to memory); a bad argument
        raises ``ValidationError`` naming it before anything runs or is recorded.
        """
        return drive(self.pipeline.run(query, scope, filters, override_budget), self._perform)

    def run_multi(
        self,
        queries: Sequence[str],
        global_budget: int,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
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

    def _cache_key(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, Any] | None,
        override_budget: int | None,
    ) -> str:
        return self.pipeline.cache_key(query, scope, filters, override_budget)

    # -- the I/O of each step ---------------------------------------------------------------

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Read):
            return self._read(step)
        if isinstance(step, Retrieve):
            return self.retriever.retrieve(step.query, step.analysis, step.top_k, step.filters)
        return self._write(step)

    def _read(self, read: Read) -> ReadReply:
        windows = self.adaptive.windows
        if self._phases and (read.cache_key is not None or read.want_summary):
            from contextstore.redis.phases import read_ops

            cache: Any = self.cache
            cached, summary = cache.driver.run(
                read_ops(cache, windows, read.cache_key, read.want_summary)  # type: ignore[arg-type]
            )
        else:
            cached = None
            if read.cache_key is not None and self.cache is not None:
                cached = self.cache.get(read.cache_key)
            summary = windows.summary() if read.want_summary else None
        if self._joint is not None:
            candidates, generation = self._joint.candidates_with_generation(read.scope)
            return ReadReply(cached, summary, candidates, generation)
        candidates = [] if self.lessons is None else self.lessons.candidates(read.scope)
        generation = None
        if isinstance(self.retriever, VersionedRetriever):
            generation = self.retriever.generation()
        return ReadReply(cached, summary, candidates, generation)

    def _write(self, write: Write) -> WindowSummary | None:
        windows = self.adaptive.windows
        summary: WindowSummary | None = None
        if (
            self._phases
            and write.cache_key is not None
            and (write.context, write.sample) != (None, None)
        ):
            from contextstore.redis.phases import write_ops

            cache: Any = self.cache
            summary = cache.driver.run(
                write_ops(cache, windows, write.cache_key, write.context, write.sample)  # type: ignore[arg-type]
            )
        else:
            if write.context is not None and write.cache_key is not None and self.cache:
                self.cache.put(write.cache_key, write.context)
            if write.sample is not None:
                summary = windows.record(write.sample)
        if self.metrics is not None:
            self.metrics.record(write.metric)
        return summary
