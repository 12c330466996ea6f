"""Exact top-k BM25 with dynamic pruning (MaxScore), and the full ranking it must equal.

``full_scores`` is BM25 the plain way: every posting of every query term added into one score
per passage, term by term in query order. ``top_candidates`` returns a small set of passages
that is guaranteed to hold the best ``k`` of that ranking — every passage whose score could
reach the ``k``-th best, ties included — with exactly the scores ``full_scores`` gives them,
so ``ranking.top_order`` over the candidates returns the same passages in the same order, with
the same floats, as over every passage.

MaxScore, term-at-a-time: terms are visited from the highest score bound (idf × the largest
saturation in the term's postings) down. Every posting of a visited term is added to partial
scores. Once ``k`` allowed passages have a partial score above the sum of the bounds of the
terms not yet visited, a passage none of the visited terms contains cannot reach the top, and
the rest of the terms are only looked up for the passages already seen (a binary search into
each remaining posting list) rather than read whole. Common words have low idf and long
postings, so a natural-language query reads the postings of its rare words and probes those
of its common ones. Seen passages whose partial score plus the remaining bounds stays below
the threshold are dropped before the probing.

Exactness: the pruning decisions compare bounds with a relative slack of ``1e-9`` in the safe
direction, so rounding can only keep a passage, never lose one; the candidates' final scores
are summed again in query order, the order ``full_scores`` uses, so the floats are identical.

Pure: numpy only. The SQL backends can feed the same function postings read from an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["TermPostings", "full_scores", "top_candidates"]

_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class TermPostings:
    """One query term's postings.

    ``docs`` are passage numbers, strictly ascending; ``impacts[i]`` is the term's BM25
    contribution to passage ``docs[i]`` (idf × saturation, positive); ``bound`` is at least
    the largest impact.
    """

    docs: NDArray[np.int64]
    impacts: NDArray[np.float64]
    bound: float


def full_scores(postings: Sequence[TermPostings], count: int) -> NDArray[np.float64]:
    """Every passage's BM25 score (0 for no match), summed term by term in the given order."""
    scores = np.zeros(count, dtype=np.float64)
    for term in postings:
        # A term's postings name each passage once, so fancy-index += is exact.
        scores[term.docs] += term.impacts
    return scores


def top_candidates(
    postings: Sequence[TermPostings],
    count: int,
    k: int,
    allowed: NDArray[np.bool_] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Passages that may be among the best ``k`` matches, ascending, and their exact scores.

    ``postings`` are the query's terms in query order over ``count`` passages; ``allowed``
    (a mask of ``count`` booleans) restricts which passages may be returned. Every allowed
    passage whose score is at least the ``k``-th best allowed score is included, and each
    returned score equals ``full_scores(postings, count)`` at that passage, bit for bit.
    """
    live = [term for term in postings if term.docs.size]
    if k <= 0 or not live or count == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    visit = sorted(range(len(live)), key=lambda i: -live[i].bound)
    # rest[j]: the most the terms visit[j:] can add to any passage.
    rest = np.zeros(len(visit) + 1, dtype=np.float64)
    for j in range(len(visit) - 1, -1, -1):
        rest[j] = rest[j + 1] + live[visit[j]].bound
    # A first threshold from the strongest term alone: its k-th best allowed impact is a
    # lower bound of the k-th best score. Terms whose bounds together stay below it cannot
    # lift a passage the terms before them miss: they are only probed.
    first = live[visit[0]]
    impacts = first.impacts if allowed is None else first.impacts[allowed[first.docs]]
    floor = _kth_largest(impacts, k) if impacts.size >= k else 0.0
    essential = len(visit)
    while essential > 1 and rest[essential - 1] * (1.0 + _SLACK) < floor * (1.0 - _SLACK):
        essential -= 1
    if essential == len(visit):
        # Nothing to skip: score every match in query order, as full_scores does.
        scores = full_scores(postings, count)
        mask = scores > 0.0 if allowed is None else (scores > 0.0) & allowed
        candidates = np.flatnonzero(mask)
        return candidates, scores[candidates]
    partial = np.zeros(count, dtype=np.float64)
    for j in range(essential):
        partial[live[visit[j]].docs] += live[visit[j]].impacts
    # Impacts are positive, so the passages read are exactly those with a partial score.
    # (A scan of ``count`` floats is far cheaper than sorting the postings read.)
    seen = np.flatnonzero(partial)
    candidates = seen if allowed is None else seen[allowed[seen]]
    if candidates.size > k:
        # Drop seen passages that cannot reach the k-th best even with every skipped term.
        threshold = _kth_largest(partial[candidates], k)
        ceiling = (partial[candidates] + rest[essential]) * (1.0 + _SLACK)
        candidates = candidates[ceiling >= threshold * (1.0 - _SLACK)]
    return candidates, _exact_scores(postings, candidates)


def _kth_largest(values: NDArray[np.float64], k: int) -> float:
    return float(np.partition(values, values.size - k)[values.size - k])


def _exact_scores(
    postings: Sequence[TermPostings], candidates: NDArray[np.int64]
) -> NDArray[np.float64]:
    """The candidates' scores, summed in query order exactly as ``full_scores`` sums them."""
    scores = np.zeros(candidates.size, dtype=np.float64)
    if candidates.size == 0:
        return scores
    for term in postings:
        if term.docs.size == 0:
            continue
        at = np.searchsorted(term.docs, candidates)
        inside = at < term.docs.size
        hit = np.zeros(candidates.size, dtype=bool)
        hit[inside] = term.docs[at[inside]] == candidates[inside]
        # Only passages holding the term are touched, as in full_scores (x + 0.0 is x anyway).
        scores[hit] += term.impacts[at[hit]]
    return scores
