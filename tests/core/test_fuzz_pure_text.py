"""Property tests: the pure text functions never raise on strange strings
(docs/design/failures.md)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.config import TEMPLATES, ContextEngineConfig, GuardConfig
from contextstore.core.analysis import (
    ComplexityBasedAllocation,
    EqualBudgetAllocation,
    QueryAnalysis,
    RuleBasedQueryAnalyzer,
    WeightedBudgetAllocation,
)
from contextstore.core.compose import Chunk, compose_context, filter_chunks, rank_chunks
from contextstore.core.guard import ContextGuard

ANALYZER = RuleBasedQueryAnalyzer()

# Arbitrary code points including lone surrogates, plus the scripts and symbols the rules
# look at, so the interesting branches are reached often.
any_char = st.characters(exclude_categories=())  # surrogates (Cs) included
rule_char = st.sampled_from(list('abcXYZ .-_*\n\t"“”«»[]:\u064b\u0651إأآابق،؟\ud800'))
texts = st.one_of(
    st.text(any_char, max_size=200),
    st.text(rule_char, max_size=200),
    st.lists(
        st.sampled_from(
            [
                "what is",
                "compare",
                "قارن",
                "قيّم",
                "page 3",
                "[Source:",
                "[:",
                "---",
                "Redis",
                "os.path",
                "\ud83d",
            ]
        ),
        max_size=30,
    ).map(" ".join),
)
huge_text = st.builds(
    lambda s, n: s * n, st.text(any_char, min_size=1, max_size=5), st.just(20_000)
)
budgets = st.integers(min_value=-(10**6), max_value=10**6)
counts = st.integers(min_value=-5, max_value=40)


@given(st.one_of(texts, huge_text))
@settings(max_examples=300, deadline=None)
def test_analyze_never_raises(query: str) -> None:
    result = ANALYZER.analyze(query)
    assert result.original_query == query
    assert len(result.keywords) <= 12
    assert result.language in {"ar", "en"}
    # "" only for a blank query, which is also the only one with the unknown intent.
    blank = not query.strip()
    assert result.question_type in ({""} if blank else {"wh-question", "yes/no", "open"})
    assert (result.intent.value == "unknown") == blank
    assert result.context_budget in {800, 2000, 4000}
    assert ANALYZER.analyze(result.normalized).normalized == result.normalized


@given(budgets, counts)
def test_equal_allocation_shape(total: int, n: int) -> None:
    budgets_ = EqualBudgetAllocation().allocate(total, n)
    if n <= 0:
        assert budgets_ == []
    else:
        assert len(budgets_) == n and sum(budgets_) == total


weights = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.integers(0, 10**6)


@given(budgets, st.lists(weights, max_size=40))
def test_weighted_allocation_shape(total: int, ws: list[float]) -> None:
    n = len(ws)
    budgets_ = WeightedBudgetAllocation(ws).allocate(total, n)
    if n == 0:
        assert budgets_ == []
    else:
        assert len(budgets_) == n and sum(budgets_) == total
        assert all(b >= 1 for b in budgets_[1:])


@given(st.integers(1, 10**6), st.lists(st.floats(0, 1e6) | st.integers(0, 10**6), min_size=1))
def test_weighted_allocation_sums_to_total_when_total_covers_n(total: int, ws: list[float]) -> None:
    budgets_ = WeightedBudgetAllocation(ws).allocate(max(total, len(ws)), len(ws))
    assert len(budgets_) == len(ws) and sum(budgets_) == max(total, len(ws))


@given(st.lists(texts, max_size=10), budgets, counts, st.booleans())
@settings(max_examples=150, deadline=None)
def test_complexity_allocation_shape(
    queries: list[str], total: int, extra: int, match: bool
) -> None:
    analyses: list[QueryAnalysis] = [ANALYZER.analyze(q) for q in queries]
    n = len(analyses) if match else extra
    budgets_ = ComplexityBasedAllocation().allocate(total, n, analyses)
    if n <= 0:
        assert budgets_ == []
    else:
        assert len(budgets_) == n and sum(budgets_) == total
        if match:
            # Every query but the first gets at least 1; the first absorbs the remainder,
            # or the excess the floor of 1 handed out (it can drop below 1).
            assert all(b >= 1 for b in budgets_[1:])


def _vector(text: str) -> np.ndarray:
    # Deterministic, sometimes zero, sometimes NaN, sometimes raising: every branch.
    if "\ud800" in text:
        raise UnicodeError("lone surrogate")
    if "nan" in text:
        return np.array([math.nan, 1.0])
    return np.array([text.count("a"), text.count("b")], dtype=float)


@given(st.one_of(texts, huge_text), texts, st.booleans(), st.integers(-5, 50), st.booleans())
@settings(max_examples=300, deadline=None)
def test_validate_never_raises(
    context: str, query: str, relevance: bool, min_length: int, with_embed: bool
) -> None:
    config = ContextEngineConfig(
        guard=GuardConfig(check_relevance=relevance, min_context_length=min_length)
    )
    guard = ContextGuard(config, _vector if with_embed else None)
    passed, warnings = guard.validate(context, query, ANALYZER.analyze(query))
    assert isinstance(passed, bool)
    assert all(isinstance(w, str) for w in warnings)
    if not passed:
        assert warnings


chunks = st.builds(
    Chunk,
    text=st.one_of(texts, huge_text),
    source=texts,
    score=st.floats(allow_nan=True, allow_infinity=True),
)


@given(st.lists(chunks, max_size=12), st.integers(-5, 100), st.integers(-5, 5000))
@settings(max_examples=200, deadline=None)
def test_filter_and_rank_never_raise(items: list[Chunk], low: int, high: int) -> None:
    kept = filter_chunks(items, low, high)
    assert all(c in items for c in kept)
    ranked = rank_chunks(kept, ANALYZER.analyze("redis memory"))
    assert sorted(map(id, ranked)) == sorted(map(id, kept))


@given(st.lists(chunks, max_size=12), budgets, st.sampled_from(TEMPLATES))
@settings(max_examples=300, deadline=None)
def test_compose_never_raises_and_never_exceeds_the_budget(
    items: list[Chunk], budget: int, template: str
) -> None:
    result = compose_context(items, budget, template)
    assert len(result.text) <= max(budget, 0)
    assert len(result.chunks_used) <= len(items)
    if result.truncated:
        assert result.chunks_used == (items[0],)


@settings(max_examples=300)
@given(texts)
def test_arabic_share_counts_every_non_space_character_once(text: str) -> None:
    from contextstore.core.analysis import _ARABIC_CHAR, is_arabic_text

    non_space = [ch for ch in text if not ch.isspace()]
    arabic = len(_ARABIC_CHAR.findall(text))
    assert is_arabic_text(text) == (bool(non_space) and arabic * 10 >= len(non_space) * 3)


@settings(max_examples=300)
@given(texts)
def test_page_marker_noise_is_every_non_blank_line_a_marker(text: str) -> None:
    from contextstore.core.compose import _PAGE_MARKER, _SEPARATOR_RUN, is_noise

    dense = "".join(text.split())
    in_runs = sum(len(run) for run in _SEPARATOR_RUN.findall(dense))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    expected = (
        not dense
        or 2 * in_runs >= len(dense)
        or all(_PAGE_MARKER.fullmatch(line) for line in lines)
    )
    assert is_noise(text) == expected
