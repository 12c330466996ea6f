"""Hybrid and vector ranking over a union of candidate sets, as ``InMemoryRetriever`` ranks.

``InMemoryRetriever``'s hybrid mode scores every passage the filters allow::

    score(d) = w · bm25(d) / max bm25  +  (1 - w) · (cos(d) - min cos) / (max cos - min cos)

A database cannot score every passage per query, but it does not need to: the passages that
can reach the top ``k`` are the lexical matches (every passage with ``bm25 > 0``) and the
``k`` passages of highest cosine (a passage with ``bm25 = 0`` ranks by cosine alone), and the
three bounds come from those sets too — ``max bm25`` from the lexical matches, ``max cos``
from the nearest passages, ``min cos`` from the farthest one (the nearest neighbour of the
negated query). ``rank_union`` takes that union and those bounds and computes the same
floats, in the same order of operations, as ``InMemoryRetriever``, so the same chunks come
back in the same order with the same scores. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from contextstore.core.compose import Chunk
from contextstore.core.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    average_length,
    cosine,
    idf,
    saturation,
    top_order,
)

__all__ = ["UnionMode", "bounded_scale", "rank_union", "similarities"]

UnionMode = Literal["hybrid", "vector"]


def bounded_scale(values: NDArray[np.float64], low: float, high: float) -> NDArray[np.float64]:
    """``ranking.min_max`` with its bounds given: the same floats when they are the same."""
    if high > low:
        result: NDArray[np.float64] = (values - low) / (high - low)
        return result
    return np.full_like(values, 1.0 if high > 0.0 else 0.0)


def similarities(
    candidates: Sequence[Candidate], query_vector: NDArray[np.float32]
) -> NDArray[np.float64]:
    """``max(0, cosine)`` of each candidate with the query (0 without a usable vector)."""
    vectors = np.zeros((len(candidates), query_vector.shape[0]), dtype=np.float32)
    for row, candidate in enumerate(candidates):
        if candidate.vector is not None and candidate.vector.shape == query_vector.shape:
            vectors[row] = candidate.vector
    return cosine(vectors, query_vector)


def _keyword(
    ordered: Sequence[Candidate],
    terms: Sequence[str],
    statistics: CorpusStatistics,
    parameters: RankingParameters,
    weights: Mapping[str, int] | None,
) -> NDArray[np.float64]:
    avgdl = average_length(statistics.count, statistics.total_length)
    lengths = np.fromiter((c.length for c in ordered), dtype=np.float64, count=len(ordered))
    keyword = np.zeros(len(ordered), dtype=np.float64)
    for term in terms:
        frequency = statistics.frequencies.get(term, 0)
        if frequency <= 0:
            continue
        tf = np.fromiter(
            (c.counts.get(term, 0) for c in ordered), dtype=np.float64, count=len(ordered)
        )
        weight = (1 if weights is None else weights.get(term, 1)) * idf(statistics.count, frequency)
        keyword += weight * saturation(tf, lengths, avgdl, parameters.k1, parameters.b)
    return keyword


def rank_union(
    candidates: Iterable[Candidate],
    terms: Sequence[str],
    statistics: CorpusStatistics,
    parameters: RankingParameters,
    top_k: int,
    query_vector: NDArray[np.float32],
    mode: UnionMode,
    cosine_floor: float,
    weights: Mapping[str, int] | None = None,
) -> list[Chunk]:
    """The best ``top_k`` of ``candidates`` (lexical matches and nearest passages together).

    ``cosine_floor`` is the smallest ``max(0, cosine)`` over every passage the filters allow
    (the farthest one's, or 0 when some allowed passage has no usable vector). A passage given
    twice (same source and position) counts once, the first copy. ``vector`` ranks by cosine
    alone; ``hybrid`` fuses as the module docstring says.
    """
    unique: dict[tuple[str, int], Candidate] = {}
    for candidate in candidates:
        unique.setdefault((candidate.source, candidate.position), candidate)
    ordered = [unique[key] for key in sorted(unique)]
    if not ordered or top_k <= 0:
        return []
    similarity = similarities(ordered, query_vector)
    if mode == "vector":
        scores = similarity
    else:
        keyword = _keyword(ordered, terms, statistics, parameters, weights)
        low = min(cosine_floor, float(similarity.min()))
        w = parameters.keyword_weight
        scores = w * bounded_scale(keyword, 0.0, float(keyword.max())) + (1.0 - w) * bounded_scale(
            similarity, low, float(similarity.max())
        )
    order = top_order(scores, lambda i: (ordered[i].source, ordered[i].position), top_k)
    return [
        Chunk(
            text=ordered[i].text,
            source=ordered[i].source,
            score=float(scores[i]),
            metadata={**ordered[i].metadata, "passage": ordered[i].position},
        )
        for i in order
    ]
