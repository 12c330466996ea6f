"""docs/design/budget.md: the session token budget, token counters and the context assembler."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core import budget as budget_module
from contextstore.core.budget import (
    BudgetAllocation,
    CharTokenCounter,
    ContextAssembler,
    ContextBudget,
    ContextSources,
    PreparedContext,
    TiktokenCounter,
    TokenCounter,
    default_token_counter,
)
from contextstore.errors import ValidationError

CHARS = CharTokenCounter()
SLOTS = (
    "summaries",
    "semantic_recall",
    "cross_session",
    "code_context",
    "graph_facts",
    "recent_history",
)


class RecordingCounter:
    """chars/4, remembering every text it was asked about."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def count(self, text: str) -> int:
        self.calls.append(text)
        return len(text) // 4


def slots(allocation: BudgetAllocation) -> tuple[int, ...]:
    return tuple(getattr(allocation, name) for name in SLOTS)


# max_tokens=1000, reserve 0.2 → reserve 200; prompts of 40 + 10 tokens → available 750.
SYSTEM = "x" * 160
SKILLS = "y" * 40


@pytest.mark.parametrize(
    ("memory_first", "graph", "expected"),
    [
        (False, False, (60, 60, 30, 225, 0, 375)),
        (False, True, (52, 52, 22, 217, 30, 375)),
        (True, False, (187, 187, 112, 262, 0, 0)),
        (True, True, (165, 165, 90, 285, 45, 0)),
    ],
)
def test_allocation_table_in_every_mode(
    memory_first: bool, graph: bool, expected: tuple[int, ...]
) -> None:
    allocation = ContextBudget(1000, 0.2).allocate_with_opts(
        SYSTEM, SKILLS, CHARS, graph, memory_first=memory_first
    )
    assert slots(allocation) == expected
    assert allocation.system_prompt == 40
    assert allocation.skills == 10
    assert allocation.response_reserve == 200
    assert allocation.session_digest == 0
    assert allocation.lessons == 0


def test_allocate_equals_allocate_with_opts_defaults() -> None:
    budget = ContextBudget(1000, 0.2)
    assert budget.allocate(SYSTEM, SKILLS, CHARS, True) == budget.allocate_with_opts(
        SYSTEM, SKILLS, CHARS, True, digest_tokens=0, memory_first=False, lesson_tokens=0
    )


def test_single_precision_where_float64_differs() -> None:
    graph = ContextBudget(100, 0.0).allocate("", "", CHARS, graph_enabled=True)
    assert graph.code_context == 29  # 100 × 0.29
    assert int(100 * 0.29) == 28  # what float64 would have given
    memory = ContextBudget(180, 0.0).allocate_with_opts("", "", CHARS, memory_first=True)
    assert memory.code_context == 63  # 180 × 0.35
    assert int(180 * 0.35) == 62


def test_reserve_is_single_precision_too() -> None:
    # f32(0.29) × f32(100) rounds to 29.0; float64 gives 28.999999999999996.
    assert ContextBudget(100, 0.29).allocate("", "", CHARS).response_reserve == 29


def test_zero_max_tokens_is_all_zero_and_counts_nothing() -> None:
    counter = RecordingCounter()
    allocation = ContextBudget(0, 0.2).allocate_with_opts(
        "system", "skills", counter, True, digest_tokens=50, lesson_tokens=50
    )
    assert all(value == 0 for value in dataclasses.astuple(allocation))
    assert counter.calls == []


def test_prompts_are_counted_once_each() -> None:
    counter = RecordingCounter()
    ContextBudget(1000, 0.2).allocate(SYSTEM, SKILLS, counter)
    assert counter.calls == [SYSTEM, SKILLS]


def test_oversized_prompts_leave_every_slot_zero_and_report_real_counts() -> None:
    allocation = ContextBudget(100, 0.1).allocate_with_opts(
        "s" * 400, "k" * 40, CHARS, True, digest_tokens=5, lesson_tokens=5
    )
    assert slots(allocation) == (0, 0, 0, 0, 0, 0)
    assert (allocation.system_prompt, allocation.skills) == (100, 10)
    assert allocation.response_reserve == 10
    assert (allocation.lessons, allocation.session_digest) == (0, 0)
    assert allocation.active_sources() == 0


def test_lessons_then_digest_are_pinned_before_the_split() -> None:
    budget = ContextBudget(1000, 0.2)  # available 800 with empty prompts
    both = budget.allocate_with_opts("", "", CHARS, digest_tokens=100, lesson_tokens=100)
    assert (both.lessons, both.session_digest) == (100, 100)
    assert slots(both) == (48, 48, 24, 180, 0, 300)  # the split of the remaining 600

    # Lessons first: they take 300, the digest gets what is left (500), not its 600.
    squeezed = budget.allocate_with_opts("", "", CHARS, digest_tokens=600, lesson_tokens=300)
    assert (squeezed.lessons, squeezed.session_digest) == (300, 500)
    assert slots(squeezed) == (0, 0, 0, 0, 0, 0)

    greedy = budget.allocate_with_opts("", "", CHARS, digest_tokens=10, lesson_tokens=900)
    assert (greedy.lessons, greedy.session_digest) == (800, 0)


def test_negative_pins_count_as_zero() -> None:
    allocation = ContextBudget(1000, 0.2).allocate_with_opts(
        "", "", CHARS, digest_tokens=-50, lesson_tokens=-50
    )
    assert (allocation.lessons, allocation.session_digest) == (0, 0)
    assert allocation.recent_history == 400


@pytest.mark.parametrize("ratio", [-0.5, -math.inf, math.nan, 0.0])
def test_negative_or_nan_reserve_is_zero(ratio: float) -> None:
    allocation = ContextBudget(1000, ratio).allocate("", "", CHARS)
    assert allocation.response_reserve == 0
    assert allocation.recent_history == 500


def test_infinite_reserve_saturates_and_takes_the_whole_window() -> None:
    allocation = ContextBudget(1000, math.inf).allocate("", "", CHARS)
    assert allocation.response_reserve == 2**64 - 1
    assert slots(allocation) == (0, 0, 0, 0, 0, 0)


def test_reserve_above_one_is_not_clamped() -> None:
    allocation = ContextBudget(100, 1.5).allocate("", "", CHARS)
    assert allocation.response_reserve == 150
    assert slots(allocation) == (0, 0, 0, 0, 0, 0)


def test_with_graph_enabled_sets_the_default_and_the_argument_wins() -> None:
    plain = ContextBudget(1000, 0.2)
    graph = plain.with_graph_enabled(True)
    assert graph is not plain
    assert (plain.graph_enabled, graph.graph_enabled) == (False, True)
    assert graph.max_tokens == 1000 and graph.reserve_ratio == 0.2

    assert graph.allocate(SYSTEM, SKILLS, CHARS).graph_facts == 30
    assert graph.allocate(SYSTEM, SKILLS, CHARS, graph_enabled=None).graph_facts == 30
    assert graph.allocate(SYSTEM, SKILLS, CHARS, graph_enabled=False).graph_facts == 0
    assert plain.allocate(SYSTEM, SKILLS, CHARS).graph_facts == 0
    assert plain.allocate(SYSTEM, SKILLS, CHARS, graph_enabled=True).graph_facts == 30
    assert graph.with_graph_enabled(False).allocate(SYSTEM, SKILLS, CHARS).graph_facts == 0


def test_max_tokens_is_read_only_and_validated() -> None:
    budget = ContextBudget(128_000, 0.15)
    assert budget.max_tokens == 128_000
    with pytest.raises(AttributeError):
        budget.max_tokens = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_tokens"):
        ContextBudget(-1, 0.1)
    with pytest.raises(ValueError, match="max_tokens"):
        ContextBudget(2**64, 0.1)
    ContextBudget(2**64 - 1, 0.1).allocate("", "", CHARS)  # the largest window still works


@pytest.mark.parametrize(
    ("max_tokens", "ratio", "field"),
    [
        (-1, 0.1, "max_tokens"),
        ("8192", 0.1, "max_tokens"),
        (True, 0.1, "max_tokens"),
        (8192.0, 0.1, "max_tokens"),
        (8192, "0.15", "reserve_ratio"),
        (8192, None, "reserve_ratio"),
    ],
)
def test_bad_constructor_arguments_name_the_field(max_tokens: Any, ratio: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ContextBudget(max_tokens, ratio)
    assert caught.value.field == field


def test_active_sources_counts_memory_slots_only() -> None:
    budget = ContextBudget(1000, 0.2)
    assert budget.allocate("", "", CHARS).active_sources() == 4
    assert budget.allocate("", "", CHARS, graph_enabled=True).active_sources() == 5
    history_only = BudgetAllocation(9, 9, 0, 0, 0, 0, 0, 100, 9, 9, 9)
    assert history_only.active_sources() == 0
    assert BudgetAllocation(0, 0, 0, 0, 0, 0, 1, 0, 0, 0).active_sources() == 1


def test_allocation_is_frozen() -> None:
    allocation = ContextBudget(1000, 0.2).allocate("", "", CHARS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        allocation.summaries = 1  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(
    max_tokens=st.integers(0, 2**24),
    ratio=st.floats(allow_nan=True, allow_infinity=True),
    system=st.text(st.characters(), max_size=200),
    skills=st.text(st.characters(), max_size=200),
    graph=st.none() | st.booleans(),
    memory_first=st.booleans(),
    digest=st.integers(-(2**30), 2**30),
    lessons=st.integers(-(2**30), 2**30),
)
def test_allocate_never_raises_and_never_overspends(
    max_tokens: int,
    ratio: float,
    system: str,
    skills: str,
    graph: bool | None,
    memory_first: bool,
    digest: int,
    lessons: int,
) -> None:
    allocation = ContextBudget(max_tokens, ratio).allocate_with_opts(
        system, skills, CHARS, graph, digest, memory_first, lessons
    )
    assert all(value >= 0 for value in dataclasses.astuple(allocation))
    if max_tokens == 0:
        return
    available = max(0, max_tokens - allocation.response_reserve)
    available = max(0, available - CHARS.count(system) - CHARS.count(skills))
    assert allocation.lessons == min(max(0, lessons), available)
    assert allocation.session_digest == min(max(0, digest), available - allocation.lessons)
    assert sum(slots(allocation)) <= available - allocation.lessons - allocation.session_digest


@settings(max_examples=100, deadline=None)
@given(max_tokens=st.integers(0, 2**64 - 1), ratio=st.floats())
def test_allocate_never_raises_on_huge_windows(max_tokens: int, ratio: float) -> None:
    allocation = ContextBudget(max_tokens, ratio).allocate("s", "k", CHARS, True)
    assert all(value >= 0 for value in dataclasses.astuple(allocation))


# --- token counters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abc", 0), ("abcd", 1), ("abcdefg", 1), ("abcdefgh", 2), ("مرحبا بك", 2)],
)
def test_char_token_counter_floors_code_points(text: str, tokens: int) -> None:
    assert CHARS.count(text) == tokens


def test_char_counter_counts_code_points_not_bytes() -> None:
    arabic = "مرحبا بك"  # 8 code points, 15 UTF-8 bytes
    assert len(arabic.encode()) // 4 == 3
    assert CHARS.count(arabic) == 2
    assert CHARS.count("\ud800\udfff\ud800x") == 1  # lone surrogates are code points too


def test_builtin_counters_satisfy_the_protocol(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    _patch_get_encoding(monkeypatch, OSError("offline"))
    assert isinstance(CHARS, TokenCounter)
    assert isinstance(TiktokenCounter(), TokenCounter)
    assert isinstance(RecordingCounter(), TokenCounter)
    assert not isinstance(object(), TokenCounter)


class FakeEncoding:
    """One token per code point, recording calls."""

    def __init__(self) -> None:
        self.calls = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        return [ord(ch) for ch in text]


@pytest.fixture
def fresh_loader() -> Iterator[None]:
    budget_module._load_encoding.cache_clear()
    yield
    budget_module._load_encoding.cache_clear()


def _patch_get_encoding(monkeypatch: pytest.MonkeyPatch, result: Any) -> None:
    tiktoken = pytest.importorskip("tiktoken")

    def get_encoding(name: str) -> Any:
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)


def test_tiktoken_counter_falls_back_when_the_encoding_cannot_load(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None, caplog: pytest.LogCaptureFixture
) -> None:
    _patch_get_encoding(monkeypatch, OSError("offline"))
    with caplog.at_level(logging.DEBUG, logger="contextstore.core.budget"):
        first = TiktokenCounter()
        second = TiktokenCounter()
    assert not first.uses_tiktoken and not second.uses_tiktoken
    assert first.count("abcdefgh") == 2
    assert first.count("abc") == 0
    records = [r for r in caplog.records if r.name == "contextstore.core.budget"]
    assert len(records) == 1  # once per process and encoding, not per counter
    assert records[0].levelno == logging.INFO
    assert "offline" in records[0].getMessage()
    assert isinstance(default_token_counter(), CharTokenCounter)


def test_tiktoken_counter_falls_back_when_tiktoken_is_missing(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes the import raise ImportError
    counter = TiktokenCounter()
    assert not counter.uses_tiktoken
    assert counter.count("a" * 41) == 10


def test_tiktoken_counter_uses_the_encoding_and_memoises(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    encoding = FakeEncoding()
    _patch_get_encoding(monkeypatch, encoding)
    counter = TiktokenCounter()
    assert counter.uses_tiktoken
    assert counter.count("abc") == 3
    assert counter.count("abc") == 3
    assert encoding.calls == 1
    assert isinstance(default_token_counter(), TiktokenCounter)


def test_tiktoken_counter_cache_is_bounded(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    encoding = FakeEncoding()
    _patch_get_encoding(monkeypatch, encoding)
    counter = TiktokenCounter(cache_size=2)
    for text in ("a", "b", "c", "a"):
        counter.count(text)
    assert encoding.calls == 4  # "a" was evicted by "c"


def test_tiktoken_counter_uses_chars_over_65536_bytes(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    encoding = FakeEncoding()
    _patch_get_encoding(monkeypatch, encoding)
    counter = TiktokenCounter()
    at_limit = "😀" * 16_384  # exactly 65,536 bytes: still encoded
    over_limit = "😀" * 16_385  # 65,540 bytes in 16,385 code points
    assert counter.count(at_limit) == 16_384
    assert counter.count(over_limit) == 4_096
    assert counter.count("a" * 65_537) == 16_384
    assert encoding.calls == 1


def test_tiktoken_counter_never_raises_offline_on_strange_text(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    _patch_get_encoding(monkeypatch, RuntimeError("no network"))
    counter = TiktokenCounter()
    assert counter.count("<|endoftext|>\ud800") == 3


# --- assembler ------------------------------------------------------------------------------

PREFIXES = {
    "summaries": "[conversation summaries]\n",
    "semantic_recall": "[semantic recall]\n",
    "cross_session": "[cross-session context]\n",
    "code_context": "## Relevant documents\n",
    "graph_facts": "[known facts]\n",
    "recent_history": "[recent history]\n",
}


def allocation_with(**budgets: int) -> BudgetAllocation:
    fields = {name: 0 for name in SLOTS} | budgets
    return BudgetAllocation(
        system_prompt=0, skills=0, response_reserve=0, session_digest=0, lessons=0, **fields
    )


def test_every_slot_gets_its_prefix() -> None:
    sources = ContextSources(**{name: (f"{name} item",) for name in SLOTS})
    prepared = ContextAssembler(CHARS).assemble(
        allocation_with(**{name: 100 for name in SLOTS}), sources
    )
    for name in SLOTS:
        assert getattr(prepared, name) == f"{PREFIXES[name]}{name} item\n"
    assert prepared.items_included == 6
    assert prepared.items_dropped == 0
    assert prepared.total_tokens == sum(
        CHARS.count(f"{PREFIXES[name]}{name} item\n") for name in SLOTS
    )


def test_filling_stops_at_the_first_item_that_does_not_fit() -> None:
    # Budget 10 tokens = at most 43 characters; the prefix takes 25.
    sources = ContextSources(summaries=("a" * 9, "b" * 9, "c"))
    prepared = ContextAssembler(CHARS).assemble(allocation_with(summaries=10), sources)
    # "c" would fit after "a"*9 (37 characters) but is never tried once "b"*9 overflows.
    assert prepared.summaries == "[conversation summaries]\n" + "a" * 9 + "\n"
    assert prepared.total_tokens == 8
    assert (prepared.items_included, prepared.items_dropped) == (1, 2)


def test_the_prefix_counts_against_the_slot() -> None:
    # The item alone is 5 tokens, within budget; with the 25-character prefix it is 11.
    sources = ContextSources(summaries=("a" * 19,))
    prepared = ContextAssembler(CHARS).assemble(allocation_with(summaries=10), sources)
    assert prepared.summaries is None


def test_multiple_items_are_one_line_each() -> None:
    sources = ContextSources(graph_facts=("alpha", "beta", ""))
    prepared = ContextAssembler(CHARS).assemble(allocation_with(graph_facts=100), sources)
    assert prepared.graph_facts == "[known facts]\nalpha\nbeta\n\n"


def test_zero_budget_and_empty_items_give_none() -> None:
    sources = ContextSources(summaries=("fits easily",), semantic_recall=())
    prepared = ContextAssembler(CHARS).assemble(
        allocation_with(semantic_recall=100, summaries=0), sources
    )
    assert prepared == PreparedContext(None, None, None, None, None, None, 0, 0, 1)


def test_assembler_counts_each_candidate_body_with_its_counter() -> None:
    counter = RecordingCounter()
    sources = ContextSources(cross_session=("one", "two"))
    ContextAssembler(counter).assemble(allocation_with(cross_session=100), sources)
    prefix = PREFIXES["cross_session"]
    assert counter.calls == [f"{prefix}one\n", f"{prefix}one\ntwo\n"]


def test_assembler_fills_a_real_allocation() -> None:
    allocation = ContextBudget(400, 0.0).allocate_with_opts("", "", CHARS, memory_first=True)
    sources = ContextSources(
        summaries=("s" * 30,) * 15, recent_history=("never: memory-first has no history",)
    )
    prepared = ContextAssembler(CHARS).assemble(allocation, sources)
    assert allocation.summaries == 100 and allocation.recent_history == 0
    assert prepared.recent_history is None
    assert prepared.summaries is not None
    # 25 + 12 × 31 = 397 characters = 99 tokens; a 13th line would make 107.
    assert prepared.summaries.count("\n") == 1 + 12
    assert prepared.items_dropped == 3 + 1
