"""Hand-built domain values for tests that must not depend on the analyzer's output."""

from __future__ import annotations

from contextstore.analysis import QueryAnalysis, QueryComplexity, QueryIntent


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
