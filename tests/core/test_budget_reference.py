"""docs/design/budget.md: the budget's arithmetic, exact to the last unit.

``f32(n)`` of an integer rounds once, to nearest-even (Rust's ``n as f32``), never through a
float64 first; a reserve beyond the integer range saturates at 2**64 − 1 (Rust's ``as usize``).
The reference below rounds with exact rational arithmetic, independently of the code under
test.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.budget import CharTokenCounter, ContextBudget, f32_from_int

CHARS = CharTokenCounter()
USIZE_MAX = 2**64 - 1


def f32_bits(value: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def reference_f32(n: int) -> float:
    """The float32 nearest to ``n``, ties to the one with an even last mantissa bit."""
    # Every float32 in range is float64-exact: walk the float32 neighbours of a rough guess.
    guess = np.float32(float(n)) if abs(n) < 2**128 else np.float32(math.copysign(math.inf, n))
    neighbours = {np.nextafter(guess, np.float32(-np.inf)), guess}
    neighbours.add(np.nextafter(guess, np.float32(np.inf)))
    finite = [v for v in neighbours if math.isfinite(v)]
    best = min(finite, key=lambda v: (abs(Fraction(float(v)) - n), f32_bits(float(v)) & 1))
    return float(best)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, 0.0),
        (2**24, 2.0**24),
        (2**24 + 1, 2.0**24),  # tie → even
        (2**24 + 3, 2.0**24 + 4),  # tie → even, upwards
        (9007199791611905, 9007200328482816.0),  # float64 first would give 2**53
        (2**64 - 1, 2.0**64),
        (-(2**53) - 2**29 - 1, -(2.0**53) - 2**30),
        (2**200, math.inf),
    ],
)
def test_f32_of_an_integer_rounds_once(n: int, expected: float) -> None:
    value = f32_from_int(n)
    assert isinstance(value, np.float32)
    assert float(value) == expected


def test_numpy_alone_would_round_twice() -> None:
    # Why f32_from_int exists: numpy converts a Python int through float64.
    assert float(np.float32(9007199791611905)) == 2.0**53
    assert float(f32_from_int(9007199791611905)) == 2.0**53 + 2**30


@settings(max_examples=2000, deadline=None)
@given(
    n=st.integers(0, 2**64)
    | st.integers(2**53 - 2**32, 2**53 + 2**40)
    | st.builds(
        lambda e, k: (1 << e) + k * (1 << (e - 25)), st.integers(25, 63), st.integers(0, 2**25)
    )
)
def test_f32_of_an_integer_is_the_nearest_even_float32(n: int) -> None:
    assert float(f32_from_int(n)) == reference_f32(n)


def test_the_example_above_2_53_allocates_as_documented() -> None:
    allocation = ContextBudget(9007199791611905, 0.0).allocate("", "", CHARS)
    assert allocation.summaries == 720575991382016
    assert allocation.semantic_recall == 720575991382016
    assert allocation.cross_session == 360287995691008
    assert allocation.code_context == 2702160152231936
    assert allocation.recent_history == 4503600164241408
    assert allocation.response_reserve == 0


@pytest.mark.parametrize(
    ("max_tokens", "ratio"),
    [(2**63, 4.0), (2**64 - 1, 1.0), (2**64 - 1, 1e30), (1000, math.inf), (1, 3.5e38)],
)
def test_an_overflowing_reserve_saturates_at_the_largest_usize(
    max_tokens: int, ratio: float
) -> None:
    allocation = ContextBudget(max_tokens, ratio).allocate("system prompt", "", CHARS)
    assert allocation.response_reserve == USIZE_MAX
    assert allocation.system_prompt == 3
    assert (allocation.summaries, allocation.recent_history, allocation.code_context) == (0, 0, 0)


def test_a_reserve_just_below_2_64_is_truncated_not_saturated() -> None:
    # f32(2**63) * f32(1.5) = 1.5 * 2**63, exact and below 2**64.
    allocation = ContextBudget(2**63, 1.5).allocate("", "", CHARS)
    assert allocation.response_reserve == 3 * 2**62


def test_a_reserve_ratio_beyond_float64_is_an_infinite_one() -> None:
    assert ContextBudget(100, 10**400).reserve_ratio == math.inf
    assert ContextBudget(100, 10**400).allocate("", "", CHARS).response_reserve == USIZE_MAX
    assert ContextBudget(100, -(10**400)).allocate("", "", CHARS).response_reserve == 0


@settings(max_examples=500, deadline=None)
@given(max_tokens=st.integers(1, 2**64 - 1), ratio=st.floats(0, 0.9))
def test_every_slot_is_the_f32_product_of_the_exactly_rounded_window(
    max_tokens: int, ratio: float
) -> None:
    allocation = ContextBudget(max_tokens, ratio).allocate("", "", CHARS)
    reserve_product = np.float32(reference_f32(max_tokens)) * np.float32(ratio)
    assert allocation.response_reserve == int(reserve_product)
    available = max(0, max_tokens - allocation.response_reserve)
    window = np.float32(reference_f32(available))
    assert allocation.summaries == int(window * np.float32(0.08))
    assert allocation.code_context == int(window * np.float32(0.30))
    assert allocation.recent_history == int(window * np.float32(0.50))
