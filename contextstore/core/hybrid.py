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
    keyword_scores,
    similarities,
    top_chunks,
)

__all__ = ["UnionMode", "bounded_scale", "rank_union", "similarities"]

UnionMode = Literal["hybrid", "vector"]


def bounded_scale(values: NDArray[np.float64], low: float, high: float) -> NDArray[np.float64]:
    """``ranking.min_max`` with its bounds given: the same floats when they are the same."""
    if high > low:
        result: NDArray[np.float64] = (values - low) / (high - low)
        return result
    return np.full_like(values, 1.0 if high > 0.0 else 0.0)


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
        keyword = keyword_scores(ordered, terms, statistics, parameters, weights)
        low = min(cosine_floor, float(similarity.min()))
        w = parameters.keyword_weight
        scores = w * bounded_scale(keyword, 0.0, float(keyword.max())) + (1.0 - w) * bounded_scale(
            similarity, low, float(similarity.max())
        )
    return top_chunks(ordered, scores, top_k)
