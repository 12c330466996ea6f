"""Hand-built domain values for tests: analyses and metrics rows with plausible defaults."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from contextstore.core.analysis import QueryAnalysis, QueryComplexity, QueryIntent
from contextstore.core.metrics import QueryMetric


def make_analysis(
    query: str = "q",
    *,
    budget: int = 800,
    complexity: QueryComplexity = QueryComplexity.LOW,
) -> QueryAnalysis:
    """A factual English analysis of ``query`` with the given budget and complexity."""
    return QueryAnalysis(
        original_query=query,
        normalized=query.strip(),
        intent=QueryIntent.FACTUAL,
        complexity=complexity,
        keywords=(),
        entities=(),
        is_arabic=False,
        language="en",
        question_type="open",
        context_budget=budget,
    )


def make_metric(recorded_at: datetime, **fields: Any) -> QueryMetric:
    """A plausible metrics row recorded at ``recorded_at``; ``fields`` override any column."""
    values: dict[str, Any] = {
        "recorded_at": recorded_at,
        "namespace": "ns",
        "worker": "alpha-1",
        "query_hash": "0" * 32,
        "complexity": "low",
        "intent": "factual",
        "budget": 800,
        "context_length": 100,
        "chunk_count": 2,
        "lessons_matched": 3,
        "lessons_included": 1,
        "response_ms": 12.5,
        "guard_passed": True,
        "cache_hit": False,
    }
    values.update(fields)
    return QueryMetric(**values)
