"""Exact top-k: dynamic pruning returns the full ranking's top-k, same floats, same order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    rank,
    top_order,
)
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.core.topk import TermPostings, full_scores, top_candidates
from tests.factories import make_analysis

# A skewed vocabulary: word i is drawn with weight 1 / (i + 1)^1.3, and stop words dominate.
STOPS = ["the", "of", "and", "to", "is"]
WORDS = [*STOPS, *(f"w{i}" for i in range(40))]
WEIGHTS = [20.0] * len(STOPS) + [1.0 / (i + 1) ** 1.3 for i in range(40)]


@st.composite
def corpora(draw: st.DrawFn) -> tuple[list[tuple[str, str, dict[str, Any]]], str, int]:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    probabilities = np.array(WEIGHTS) / sum(WEIGHTS)
    count = draw(st.integers(1, 60))
    documents = []
    for number in range(count):
        length = int(rng.integers(1, 40))
        words = rng.choice(WORDS, size=length, p=probabilities)
        # Few sources, so equal scores are broken by source, then passage, then insertion.
        source = f"s{int(rng.integers(0, 6))}"
        documents.append((" ".join(words), source, {"group": number % 3}))
    if draw(st.booleans()) and documents:
        documents.extend(documents[: count // 2])  # exact duplicates tie exactly
    query_length = draw(st.integers(1, 12))
    stop_heavy = draw(st.booleans())
    pool = STOPS * 4 + WORDS if stop_heavy else WORDS
    query = " ".join(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=query_length)))
    top_k = draw(st.integers(1, 15))
    return documents, query, top_k


def reference(
    retriever: InMemoryRetriever,
    documents: list[tuple[str, str, dict[str, Any]]],
    query: str,
    top_k: int,
    group: int | None,
) -> list[tuple[str, float, int]]:
    """The ranking scored the plain way, by ranking.rank over every passage."""
    analyzer = retriever.analyzer
    candidates = []
    frequencies: dict[str, int] = {}
    total = 0
    for text, source, metadata in documents:
        terms = analyzer.terms(text)
        total += len(terms)
        counts: dict[str, int] = {}
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
        for term in counts:
            frequencies[term] = frequencies.get(term, 0) + 1
        if group is None or metadata["group"] == group:
            candidates.append(
                Candidate(text, source, 0, len(terms), counts, {**metadata, "passage": 0})
            )
    statistics = CorpusStatistics(len(documents), total, frequencies)
    weighted = dict(analyzer.weighted_query_terms(query))
    parameters = RankingParameters()
    chunks = rank(candidates, list(weighted), statistics, parameters, top_k, None, weighted)
    return [(c.source, c.score, c.metadata["group"]) for c in chunks]


@settings(max_examples=120)
@given(corpora(), st.sampled_from(["simple", "english"]), st.sampled_from([None, 0, 1]))
def test_the_retriever_returns_the_full_rankings_top_k(
    corpus: tuple[list[tuple[str, str, dict[str, Any]]], str, int],
    analyzer: str,
    group: int | None,
) -> None:
    documents, query, top_k = corpus
    retriever = InMemoryRetriever(analyzer=analyzer)
    retriever.add_documents(documents)
    filters = None if group is None else {"group": group}
    found = retriever.retrieve(query, make_analysis(query), top_k, filters)
    # The metadata's group tells apart equal texts of one source (insertion order decides).
    got = [(c.source, c.score, c.metadata["group"]) for c in found]
    assert got == reference(retriever, documents, query, top_k, group)
    # Dynamic pruning over the same index returns the same passages, scores and order.
    index = retriever._current_index()
    count = len(index.passages)
    weighted = dict(retriever.analyzer.weighted_query_terms(query))
    postings = index.postings(list(weighted), weighted)
    allowed = None
    if group is not None:
        allowed = np.array([p.metadata["group"] == group for p in index.passages], dtype=bool)
    full = full_scores(postings, count)
    if allowed is not None:
        full = np.where(allowed, full, 0.0)

    def tie(i: int) -> tuple[str, int]:
        return index.passages[i].source, index.passages[i].position

    candidates, scores = top_candidates(postings, count, top_k, allowed)
    pruned = [
        int(candidates[i]) for i in top_order(scores, lambda i: tie(int(candidates[i])), top_k)
    ]
    assert pruned == top_order(full, tie, top_k)
    assert [float(scores[list(candidates).index(i)]) for i in pruned] == [c.score for c in found]


def postings_of(matrix: np.ndarray[Any, Any]) -> list[TermPostings]:
    result = []
    for column in matrix.T:
        docs = np.flatnonzero(column > 0).astype(np.int64)
        impacts = column[docs].astype(np.float64)
        result.append(TermPostings(docs, impacts, float(impacts.max(initial=0.0))))
    return result


@settings(max_examples=150)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 300),
    st.integers(1, 8),
    st.integers(1, 20),
    st.booleans(),
)
def test_candidates_hold_the_exact_top_k(
    seed: int, count: int, terms: int, k: int, filtered: bool
) -> None:
    rng = np.random.default_rng(seed)
    # Term j is in a passage with probability from 0.9 (a stop word) down to 0.02 (rare);
    # impacts come from a few values so exact float ties are common.
    presence = np.linspace(0.9, 0.02, terms)
    matrix = (rng.random((count, terms)) < presence) * rng.choice([0.5, 1.25, 2.0], (count, terms))
    postings = postings_of(matrix)
    allowed = rng.random(count) < 0.5 if filtered else None
    full = full_scores(postings, count)
    if allowed is not None:
        full = np.where(allowed, full, 0.0)
    expected = top_order(full, lambda i: ("s", 0), k)
    candidates, scores = top_candidates(postings, count, k, allowed)
    assert np.all(np.diff(candidates) > 0)
    assert scores.tolist() == full[candidates].tolist()
    got = [int(candidates[i]) for i in top_order(scores, lambda i: ("s", 0), k)]
    assert got == expected


def test_pruning_reads_less_than_everything() -> None:
    # One rare, strong term and one term in every passage: the common term is only probed.
    count = 10_000
    rare = TermPostings(np.arange(0, count, 1000, dtype=np.int64), np.full(10, 5.0), 5.0)
    common = TermPostings(np.arange(count, dtype=np.int64), np.full(count, 0.1), 0.1)
    candidates, scores = top_candidates([common, rare], count, 3)
    assert candidates.tolist() == list(range(0, count, 1000))
    assert scores.tolist() == [0.1 + 5.0] * 10


def test_degenerate_inputs_give_nothing() -> None:
    empty = TermPostings(np.zeros(0, dtype=np.int64), np.zeros(0), 0.0)
    assert top_candidates([], 5, 3)[0].size == 0
    assert top_candidates([empty], 5, 3)[0].size == 0
    one = TermPostings(np.array([2], dtype=np.int64), np.array([1.0]), 1.0)
    assert top_candidates([one], 5, 0)[0].size == 0
    assert top_candidates([one], 5, 3)[0].tolist() == [2]


@pytest.mark.slow
@settings(max_examples=1500)
@given(corpora(), st.sampled_from(["simple", "english"]), st.sampled_from([None, 0, 2]))
def test_the_retriever_is_exact_on_many_corpora(
    corpus: tuple[list[tuple[str, str, dict[str, Any]]], str, int],
    analyzer: str,
    group: int | None,
) -> None:
    test_the_retriever_returns_the_full_rankings_top_k.hypothesis.inner_test(  # type: ignore[attr-defined]
        corpus, analyzer, group
    )


def test_an_unseen_passage_tying_the_kth_is_not_pruned() -> None:
    # Term a is visited first (equal bounds keep query order). After it, passage 1 has 2.0 and
    # the remaining bound is 2.0: passage 0, holding only b, ties and wins on the tie-break.
    a = TermPostings(np.array([1], dtype=np.int64), np.array([2.0]), 2.0)
    b = TermPostings(np.array([0], dtype=np.int64), np.array([2.0]), 2.0)
    candidates, scores = top_candidates([a, b], 2, 1)
    assert candidates.tolist() == [0, 1]
    assert [int(candidates[i]) for i in top_order(scores, lambda i: ("s", 0), 1)] == [0]
