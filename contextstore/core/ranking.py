"""The one ranking every retriever uses: BM25 over a corpus's statistics, fused with cosine.

``InMemoryRetriever`` and the SQL knowledge base both score with the functions here, so with
the same passages, the same statistics and the same query they compute the same floats in the
same order of operations, and return the same chunks in the same order:

* ``query_terms``: the query's distinct tokens, stop words dropped unless nothing else is left,
  bounded to the first ``analyzers.MAX_QUERY_TERMS``.
* ``idf`` / ``saturation``: the two factors of BM25 (the formula is in ``retrieval``'s module
  docstring). ``idf`` is a scalar ``math.log1p`` on purpose: a vectorised log may round the
  last bit differently for different array lengths, and then two backends would disagree.
* ``fuse``: min–max normalised BM25 (minimum pinned at 0) mixed with min–max normalised cosine.
* ``top_order``: the total order — score descending, then source, then position, then the
  caller's own order — cut to ``top_k``, positive scores only.
* ``rank``: all of the above over a list of ``Candidate`` passages; the knowledge base's whole
  ranking, and ``InMemoryRetriever``'s when it ranks lexical matches only.

Pure: no I/O, no clock, no storage imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from contextstore.core.analyzers import SIMPLE
from contextstore.core.compose import Chunk

__all__ = [
    "Candidate",
    "CorpusStatistics",
    "RankingParameters",
    "average_length",
    "cosine",
    "fuse",
    "idf",
    "keyword_scores",
    "query_terms",
    "rank",
    "saturation",
    "similarities",
    "top_chunks",
    "top_order",
    "unit_rows",
    "unit_vector",
]


@dataclass(frozen=True, slots=True)
class RankingParameters:
    """BM25's ``k1`` and ``b``, and the weight of BM25 against cosine when fusing."""

    k1: float = 1.5
    b: float = 0.75
    keyword_weight: float = 0.6


@dataclass(frozen=True, slots=True)
class CorpusStatistics:
    """What BM25 needs to know about the whole corpus (never only the filtered part).

    ``count`` passages of ``total_length`` tokens together; ``frequencies[t]`` is how many
    passages contain term ``t`` (a missing term counts 0).
    """

    count: int
    total_length: int
    frequencies: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One passage that may be returned.

    ``counts`` maps a term to how often it occurs in the passage (only the query's terms are
    read); ``length`` is the passage's token count; ``vector`` its unit embedding as float32
    (``unit_rows``), or ``None`` when it has none from the configured embedder.
    """

    text: str
    source: str
    position: int
    length: int
    counts: Mapping[str, int]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    vector: NDArray[np.float32] | None = None


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct tokens BM25 scores ``query`` by, in first-seen order (``simple`` analyzer).

    Stop words are dropped unless the query has nothing else; at most ``MAX_QUERY_TERMS``
    terms, the first ones (see ``analyzers``). Never raises; ``()`` when the query has no
    token at all.
    """
    return SIMPLE.query_terms(query)


def idf(count: int, frequency: int) -> float:
    """``ln(1 + (N - n_t + 0.5) / (n_t + 0.5))``, always positive."""
    return math.log1p((count - frequency + 0.5) / (frequency + 0.5))


def average_length(count: int, total_length: int) -> float:
    """Mean passage length in tokens; 1.0 for an empty corpus or one without any token."""
    return total_length / count if count and total_length > 0 else 1.0


def saturation(
    tf: NDArray[np.float64], lengths: NDArray[np.float64], avgdl: float, k1: float, b: float
) -> NDArray[np.float64]:
    """BM25's per-passage term weight without the idf: element-wise, so order-independent."""
    norm = k1 * (1.0 - b + b * lengths / avgdl)
    result: NDArray[np.float64] = tf * (k1 + 1.0) / (tf + norm)
    return result


def min_max(values: NDArray[np.float64], low: float | None = None) -> NDArray[np.float64]:
    """Scale to [0, 1]; ``low`` pins the minimum (default: the smallest value)."""
    high = float(values.max())
    low = float(values.min()) if low is None else low
    if high > low:
        result: NDArray[np.float64] = (values - low) / (high - low)
        return result
    return np.full_like(values, 1.0 if high > 0.0 else 0.0)


def fuse(
    keyword: NDArray[np.float64], similarity: NDArray[np.float64], keyword_weight: float
) -> NDArray[np.float64]:
    """``w · norm(bm25) + (1 - w) · norm(cos)`` over the passages given (never empty)."""
    result: NDArray[np.float64] = keyword_weight * min_max(keyword, low=0.0) + (
        1.0 - keyword_weight
    ) * min_max(similarity)
    return result


def unit_rows(matrix: NDArray[np.float64]) -> NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero; NaN and infinities become 0), float32."""
    clean = np.nan_to_num(np.asarray(matrix, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(clean, axis=1)
    clean /= np.where(norms > 0.0, norms, 1.0)[:, None]
    rows: NDArray[np.float32] = clean.astype(np.float32)
    return rows


def unit_vector(vector: object, dim: int) -> NDArray[np.float32] | None:
    """The query's embedding as a unit float32 vector; ``None`` if it is not ``dim`` long.

    A zero vector stays zero (every cosine is then 0). NaN and infinities become 0.
    """
    array = np.asarray(vector, dtype=np.float64).ravel()
    if array.shape != (dim,):
        return None
    array = np.nan_to_num(array, nan=0.0, posinf=0.0, neginf=0.0)
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        return np.zeros(dim, dtype=np.float32)
    unit: NDArray[np.float32] = (array / norm).astype(np.float32)
    return unit


def cosine(vectors: NDArray[np.float32], unit: NDArray[np.float32]) -> NDArray[np.float64]:
    """``max(0, cosine)`` of each unit row with the unit query vector."""
    # einsum, not `@`: BLAS may hand a matrix-vector product to its thread pool, which on a
    # busy host (many agent workers) turns a 0.1 ms product into 10+ ms stalls.
    products = np.einsum("ij,j->i", vectors, unit)
    result: NDArray[np.float64] = np.maximum(products, 0.0).astype(np.float64)
    return result


def top_order(
    scores: NDArray[np.float64], tie_key: Callable[[int], tuple[str, int]], top_k: int
) -> list[int]:
    """Indices of the ``top_k`` best positive scores in the total order.

    Score descending, then ``tie_key(index)`` — (source, position) — ascending, then index
    ascending; ``tie_key`` is only called for the few indices that can reach the top.
    Only the scores that can reach the top ``top_k`` are sorted in Python (every score tied
    with the ``top_k``-th included), so a query matching most of a large corpus stays cheap.
    """
    positive = np.flatnonzero(scores > 0.0)
    if top_k <= 0 or positive.size == 0:
        return []
    if positive.size > top_k:
        threshold = np.partition(scores[positive], positive.size - top_k)[positive.size - top_k]
        positive = positive[scores[positive] >= threshold]
    chosen = sorted(
        (int(i) for i in positive),
        key=lambda i: (-float(scores[i]), *tie_key(i), i),
    )
    return chosen[:top_k]


def keyword_scores(
    ordered: Sequence[Candidate],
    terms: Sequence[str],
    statistics: CorpusStatistics,
    parameters: RankingParameters,
    weights: Mapping[str, int] | None = None,
) -> NDArray[np.float64]:
    """The BM25 score of each candidate for ``terms``, in the order given.

    A term no passage holds (frequency 0) adds nothing; ``weights`` multiply a term's idf
    (1 when missing).
    """
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


def similarities(
    candidates: Sequence[Candidate], query_vector: NDArray[np.float32]
) -> NDArray[np.float64]:
    """``max(0, cosine)`` of each candidate with the query (0 without a usable vector)."""
    vectors = np.zeros((len(candidates), query_vector.shape[0]), dtype=np.float32)
    for row, candidate in enumerate(candidates):
        if candidate.vector is not None and candidate.vector.shape == query_vector.shape:
            vectors[row] = candidate.vector
    return cosine(vectors, query_vector)


def top_chunks(
    ordered: Sequence[Candidate], scores: NDArray[np.float64], top_k: int
) -> list[Chunk]:
    """The ``top_order`` of ``scores`` as chunks: the candidate's metadata plus ``"passage"``."""
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


def rank(
    candidates: Iterable[Candidate],
    terms: Sequence[str],
    statistics: CorpusStatistics,
    parameters: RankingParameters,
    top_k: int,
    query_vector: NDArray[np.float32] | None = None,
    weights: Mapping[str, int] | None = None,
) -> list[Chunk]:
    """The best ``top_k`` candidates for ``terms``, as chunks, in the total order.

    Only candidates sharing a term with the query (BM25 > 0) can be returned; they are put in
    (source, position) order first, so the result does not depend on the order the
    candidates came in. ``weights`` multiply a term's idf (the analyzer's query term weights;
    1 when missing). With ``query_vector`` the score is ``fuse`` over those candidates (a
    candidate without a vector has cosine 0); without it, plain BM25. The chunk's metadata is
    the candidate's plus ``"passage"`` (its position), as ``InMemoryRetriever`` returns it.
    """
    ordered = sorted(candidates, key=lambda c: (c.source, c.position))
    if not ordered or not terms or top_k <= 0:
        return []
    keyword = keyword_scores(ordered, terms, statistics, parameters, weights)
    matched = [i for i in range(len(ordered)) if keyword[i] > 0.0]
    if not matched:
        return []
    kept = [ordered[i] for i in matched]
    scores = keyword[matched]
    if query_vector is not None:
        scores = fuse(scores, similarities(kept, query_vector), parameters.keyword_weight)
    return top_chunks(kept, scores, top_k)
