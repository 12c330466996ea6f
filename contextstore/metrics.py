"""The durable record of one engine run, and where such records go.

Pure: the SQL ``MetricsRepository`` implements ``MetricsSink``; so does ``MemoryMetrics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class QueryMetric:
    """One row of ``query_metrics``: what one ``ContextEngine.run()`` did.

    ``query_hash`` is the MD5 hex of the stripped, lowercased query; ``query`` holds the raw
    text only when the configuration asks for it. Lengths are characters, times milliseconds.
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


class MetricsSink(Protocol):
    """Accepts one metric per run; must have made it durable when ``record`` returns."""

    def record(self, metric: QueryMetric) -> None: ...


@dataclass
class MemoryMetrics:
    """A ``MetricsSink`` that keeps rows in a list (tests, and runs without a database)."""

    rows: list[QueryMetric] = field(default_factory=list)

    def record(self, metric: QueryMetric) -> None:
        self.rows.append(metric)
