"""``knowledge.topk.top_candidates`` against the plain ranking it replaces.

Random posting lists with skewed lengths (a few rare terms, many common ones), impacts drawn
from a handful of values so that equal scores are common, filters and hidden rows: the
candidates must hold every allowed row scoring at least the ``k``-th best allowed score,
with ``full_scores``' floats, so ``top_order`` over them equals ``top_order`` over every row;
and the scratch must be zero again afterwards.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from contextstore.backends.sql.knowledge.topk import Masks, top_candidates
from contextstore.core.ranking import top_order
from contextstore.core.topk import TermPostings, full_scores

Postings = list[tuple[NDArray[np.int32], NDArray[np.float64]]]


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, Postings, int, Masks]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(1, 400))
    postings = []
    for _ in range(draw(st.integers(1, 9))):
        # Lengths from one row to every row; impacts from few values, so sums often tie.
        size = int(min(count, max(1, count * rng.random() ** draw(st.sampled_from([1, 3, 6])))))
        rows = np.sort(rng.choice(count, size=size, replace=False)).astype(np.int32)
        impacts = rng.choice([0.25, 0.5, 1.0, 1.7, 3.1], size=size) * rng.choice([1.0, 2.3])
        postings.append((rows, impacts))
    allowed = rng.random(count) < rng.random() if draw(st.booleans()) else None
    hidden = rng.random(count) < 0.1 if draw(st.booleans()) else None
    return count, postings, draw(st.integers(1, 15)), (allowed, hidden)


def best(scores: NDArray[np.float64], count: int, k: int) -> list[tuple[int, float]]:
    order = top_order(scores, lambda i: ("", 0), k)
    return [(int(i), float(scores[i])) for i in order]


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_the_candidates_rank_as_every_row(case: tuple[int, Postings, int, Masks]) -> None:
    count, postings, k, masks = case
    scratch = np.zeros(count, dtype=np.float64)
    rows, scores = top_candidates(postings, scratch, k, masks)
    assert not scratch.any()
    expected = full_scores([TermPostings(r.astype(np.int64), i, 0.0) for r, i in postings], count)
    allowed, hidden = masks
    if allowed is not None:
        expected[~allowed] = 0.0
    if hidden is not None:
        expected[hidden] = 0.0
    assert np.all(np.diff(rows) > 0)
    assert np.array_equal(scores, expected[rows])
    sparse = np.zeros(count, dtype=np.float64)
    sparse[rows] = scores
    assert best(sparse, count, k) == best(expected, count, k)


def test_nothing_to_rank() -> None:
    scratch = np.zeros(3, dtype=np.float64)
    rows, scores = top_candidates([], scratch, 5)
    assert rows.size == 0 and scores.size == 0
    one = (np.array([1], dtype=np.int32), np.array([2.0]))
    assert top_candidates([one], scratch, 0)[0].size == 0
    assert not scratch.any()
