"""The durable record of one engine run, and where such records go.

Pure: the SQL ``MetricsRepository`` implements ``MetricsSink``; so does ``MemoryMetrics``.
``AsyncMetricsRepository`` implements ``AsyncMetricsSink``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class RunTrace:
    """What one run used: its scope, the lessons it matched and included, its chunks' sources.

    ``lessons_matched`` holds every eligible lesson id (ascending); ``lessons_included`` the
    included ones in the order the block lists them; ``chunk_sources`` the source of each
    composed chunk in context order (a source repeats when several of its chunks were used).
    A row recorded before traces existed reads back with every tuple empty.
    """

    scope_entity_ids: tuple[str, ...] = ()
    scope_tags: tuple[str, ...] = ()
    lessons_matched: tuple[str, ...] = ()
    lessons_included: tuple[str, ...] = ()
    chunk_sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueryMetric:
    """One row of ``query_metrics``: what one ``ContextEngine.run()`` did.

    ``query_hash`` is the MD5 hex of the stripped, lowercased query; ``query`` holds the raw
    text only when the configuration asks for it. Lengths are characters, times milliseconds.

    ``response_ms`` is the run's ``ContextResult.pipeline_ms``: from the start of ``run()``
    until its result was built (the read phase, retrieval on a miss, the computation). It
    does not include the write phase that follows (caching the entry, recording the sample,
    writing this very row): a row cannot hold the time of its own writing. The benchmarks
    measure that phase and report it on its own.
    """

    recorded_at: datetime
    namespace: str
    worker: str
    query_hash: str
    complexity: str
    intent: str
    budget: int
    context_length: int
    chunk_count: int
    lessons_matched: int
    lessons_included: int
    response_ms: float
    guard_passed: bool
    cache_hit: bool
    guard_warnings: tuple[str, ...] = ()
    query: str | None = None
    trace: RunTrace = field(default_factory=RunTrace)


class MetricsSink(Protocol):
    """Accepts one metric per run; must have made it durable when ``record`` returns."""

    def record(self, metric: QueryMetric) -> None: ...


class AsyncMetricsSink(Protocol):
    """``MetricsSink`` for an event loop: the row is durable when ``record`` returns."""

    async def record(self, metric: QueryMetric) -> None: ...


@dataclass
class MemoryMetrics:
    """A ``MetricsSink`` that keeps rows in a list (tests, and runs without a database)."""

    rows: list[QueryMetric] = field(default_factory=list)

    def record(self, metric: QueryMetric) -> None:
        self.rows.append(metric)
