"""Hostile values for the fuzz tests of the HTTP API and the command line.

NUL and the other C0 controls, C1 controls, escape sequences, lone surrogates, integers far
wider than any column, very long strings (of few distinct words: a query's distinct terms
have their own bound and test) and mappings of many keys, mixed with ordinary values so
that requests also get past the first check. The fuzzers are ``slow``: CI runs them at full
strength (``examples()``), a developer by name, briefly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import FULL_RUN

SPECIAL_TEXT = [
    "",
    "\x00",
    "a\x00b",
    "\x1b]52;c;cm0gLXJmIH4=\x07",
    "\x1b[2J",
    "\x9b31m",
    "\x85\u2028\u2029",
    "\ud800",
    "tag:\udcff",
    "ops",
    "tag:ops",
    "id:nw.prod",
    "nw.prod.ops.1",
    "2026-01-01T00:00:00Z",
    "99999999999999999999",
    "-1",
    "1e400",
    "NaN",
    "../../etc/passwd",
    "%00",
    "' OR 1=1 --",
    "\\",
    '"',
]
CONTROL_TEXT = st.text(
    st.characters(min_codepoint=0, max_codepoint=0x9F, exclude_categories=()), max_size=40
)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)  # surrogates included
LONG_TEXT = st.builds(
    lambda word, times: " ".join([word] * times),
    st.sampled_from(["fail", "over", "x", "é", "\x1b", "postgres"]),
    st.integers(min_value=1_000, max_value=6_000),
)
TEXT = st.one_of(st.sampled_from(SPECIAL_TEXT), CONTROL_TEXT, ANY_TEXT, LONG_TEXT)
HUGE_INTEGERS = st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**20, 10**100])
INTEGER = st.one_of(st.integers(min_value=-5, max_value=100), HUGE_INTEGERS)
SCALAR = st.one_of(TEXT, INTEGER, st.floats(allow_nan=False), st.booleans(), st.none())
MANY_KEYS = st.integers(min_value=30, max_value=1_200).map(lambda n: {f"k{i}": i for i in range(n)})
JSON_VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(TEXT, st.just("team")), inner, max_size=5),
    ),
    max_leaves=12,
)
MAPPING = st.one_of(MANY_KEYS, st.dictionaries(TEXT, SCALAR, max_size=6), st.none())
STRINGS = st.one_of(
    st.lists(TEXT, max_size=4),
    st.integers(min_value=60, max_value=70_001).map(lambda n: [f"t{i}" for i in range(n)]),
)


def examples(default: int, ci: int) -> settings:
    """Hypothesis settings: ``default`` examples when a developer runs a fuzzer by name,
    ``ci`` in a full run (``CONTEXTSTORE_TEST_FULL=1``, as CI)."""
    return settings(
        max_examples=ci if FULL_RUN else default,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


def maybe(value: Any) -> st.SearchStrategy[Any]:
    """``value``'s strategy, or a hostile scalar in its place now and then."""
    return st.one_of(value, SCALAR)
