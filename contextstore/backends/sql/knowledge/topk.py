"""The local index's exact lexical top-k in time proportional to the query's postings.

``full_scores`` then ``top_order`` (what ``InMemoryRetriever`` runs) allocate a score per chunk
of the namespace, add every posting of the query's terms into it, and scan it whole for the
matches: a search costs time in proportion to the namespace, not to its matches. Here the
same additions land in a scratch array that is kept zeroed between searches, so only the
rows the query's postings name are ever read or written:

1. every posting is added into the scratch, term by term in query order (the first term's
   stored into the zeros, the others with ``np.add.at``), so each row's score is the same
   float ``full_scores`` computes, bit for bit;
2. a floor: the ``k``-th best allowed score among the rows of one term's postings (a term
   names a row once, so these are ``k`` distinct rows). The ``k``-th best allowed score of
   the whole query is at least that, so a row scoring below the floor cannot be returned,
   nor tie with one that is;
3. the distinct rows whose score reaches the floor, and their scores; ``ranking.top_order``
   puts them in the total order. The rows come out ascending, so its last tie-break (the
   index) still orders by row, as over every chunk.

The floor is taken from the shortest posting lists with ``k`` allowed rows (a rare word's
matches hold the best-scoring rows more often than a common word's), and from at most
``FLOOR_LISTS`` of them; with none (fewer than ``k`` allowed rows in every list), every match
is a candidate, which is still exact. See decision 0096.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["FLOOR_LISTS", "Masks", "top_candidates"]

FLOOR_LISTS = 2
"""How many posting lists (the shortest with ``k`` allowed rows) the floor is taken from."""

Masks = tuple[NDArray[np.bool_] | None, NDArray[np.bool_] | None]
"""Per row: which a filter allows (``None``: every row) and which are hidden (``None``: none)."""


def top_candidates(
    postings: Sequence[tuple[NDArray[np.int32], NDArray[np.float64]]],
    scratch: NDArray[np.float64],
    k: int,
    masks: Masks = (None, None),
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """Rows that may be among the best ``k`` allowed matches, ascending, with exact scores.

    ``postings`` are the query's terms in query order, each its rows (ascending, distinct)
    and their impacts (positive); ``scratch`` holds one zero per row of the index and is
    zero again when this returns (or raises). Every allowed row whose score is at least the
    ``k``-th best allowed score is returned, with the score ``full_scores`` gives it, bit
    for bit; every returned row is allowed and matches at least one term.
    """
    if k <= 0 or not postings:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
    filtered = masks[0] is not None or masks[1] is not None
    # Each term's rows as the index type that numpy's take, put and add.at are fastest with.
    lists = [(rows.astype(np.intp), impacts) for rows, impacts in postings]
    touched = np.concatenate([rows for rows, _ in lists])
    try:
        rows, impacts = lists[0]
        scratch[rows] = impacts  # into zeros: 0.0 + x is x, the first term's adds as stores
        for rows, impacts in lists[1:]:
            # A list names each row once, so add.at's sequential adds are fancy-index +='s.
            np.add.at(scratch, rows, impacts)
        floor = 0.0
        found = 0
        for rows, _ in sorted(lists, key=lambda p: p[0].size):
            if found == FLOOR_LISTS:
                break
            if rows.size < k:
                continue
            scores = scratch.take(rows)
            if filtered:
                scores = scores[_allowed(rows, masks)]
            if scores.size >= k:
                floor = max(floor, float(np.partition(scores, scores.size - k)[scores.size - k]))
                found += 1
        candidates = np.unique(touched[scratch.take(touched) >= floor])
        if filtered:
            candidates = candidates[_allowed(candidates, masks)]
        return candidates, scratch.take(candidates)
    finally:
        scratch[touched] = 0.0


def _allowed(rows: NDArray[np.integer], masks: Masks) -> NDArray[np.bool_]:
    allowed, hidden = masks
    result = np.ones(rows.size, dtype=bool) if allowed is None else allowed.take(rows)
    if hidden is not None:
        result &= ~hidden.take(rows)
    return result
