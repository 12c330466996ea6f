"""docs/design/matching.md: the pure lesson matcher and its rendered block."""

from __future__ import annotations

import random

import pytest

from contextstore.core.matching import (
    DEFAULT_BYTE_BUDGET,
    DEFAULT_K,
    MAX_K,
    TRACED_MATCHES,
    Lesson,
    MatchedLesson,
    MatchOptions,
    MatchResult,
    Scope,
    eligible_ids,
    lookup_keys,
    match,
    match_traced,
    parse_rfc3339,
    render_lesson_block,
)

SCOPE = Scope(entity_ids=("a.ops.x",), tags=("t",))


def lesson(
    entity_id: str,
    *,
    severity: str = "critical",
    created_at: str = "2024-01-01T00:00:00Z",
    applies_to: tuple[str, ...] = ("tag:t",),
    form: str = "f",
    status: str = "active",
) -> Lesson:
    return Lesson(entity_id, status, severity, created_at, applies_to, form)


def ids(result: MatchResult) -> list[str]:
    return [item.entity_id for item in result.included]


def shuffled(lessons: list[Lesson], seed: int = 7) -> list[Lesson]:
    copy = list(lessons)
    random.Random(seed).shuffle(copy)
    return copy


def test_constants() -> None:
    assert (DEFAULT_K, MAX_K, DEFAULT_BYTE_BUDGET) == (10, 25, 4096)


# --- ordering -------------------------------------------------------------------------------


def test_severity_rank_orders_first() -> None:
    candidates = [
        lesson("s1", severity="info", created_at="2030-01-01T00:00:00Z"),
        lesson("s2", severity="bogus", created_at="2030-01-01T00:00:00Z"),
        lesson("s3", severity="warning"),
        lesson("s4", severity="critical", created_at="2000-01-01T00:00:00Z"),
        lesson("s5", severity="Critical", created_at="2030-01-01T00:00:00Z"),  # unknown: rank 0
        lesson("s0", severity=""),  # rank 0 too, but older than s2 and s5
    ]
    assert ids(match(candidates, SCOPE)) == ["s4", "s3", "s1", "s2", "s5", "s0"]


def test_newer_first_then_empty_and_unparseable_last() -> None:
    candidates = [
        lesson("e", created_at=""),
        lesson("d", created_at="2024-05-01T00:00:00Z"),
        lesson("c", created_at="garbage"),
        lesson("b", created_at="0001-01-01T00:00:00Z"),
        lesson("a", created_at="2024-05-01"),  # a date alone is unparseable
        lesson("f", created_at="2025-01-01T00:00:00.5+01:00"),
    ]
    assert ids(match(candidates, SCOPE)) == ["f", "d", "b", "a", "c", "e"]


def test_same_instant_in_two_offsets_ties_then_entity_id() -> None:
    utc = lesson("z", created_at="2024-01-01T12:00:00Z")
    india = lesson("y", created_at="2024-01-01T17:30:00+05:30")
    assert ids(match([utc, india], SCOPE)) == ["y", "z"]
    assert ids(match([india, utc], SCOPE)) == ["y", "z"]
    # One second later in the offset form is newer, so the id no longer decides.
    later = lesson("z", created_at="2024-01-01T17:30:01+05:30")
    assert ids(match([lesson("y", created_at="2024-01-01T12:00:00Z"), later], SCOPE)) == ["z", "y"]


def test_entity_id_ascending_by_code_point() -> None:
    names = ["b", "ä", "B", "a", "aa", "A.b", "\U0001f600", "\uffff"]
    result = match([lesson(name) for name in names], SCOPE)
    assert ids(result) == ["A.b", "B", "a", "aa", "b", "ä", "\uffff", "\U0001f600"]


def test_order_is_independent_of_input_order() -> None:
    candidates = [
        lesson(f"l{i}", severity=sev, created_at=ts)
        for i, (sev, ts) in enumerate(
            [
                ("critical", "2024-01-01T00:00:00Z"),
                ("warning", "2024-01-02T00:00:00Z"),
                ("critical", ""),
                ("info", "2023-01-01T00:00:00Z"),
                ("critical", "2024-03-01T00:00:00-08:00"),
                ("warning", "2024-01-02T00:00:00Z"),
            ]
        )
    ]
    expected = ["l4", "l0", "l2", "l1", "l5", "l3"]
    for seed in range(5):
        assert ids(match(shuffled(candidates, seed), SCOPE)) == expected


# --- bounds ---------------------------------------------------------------------------------


THIRTY = [lesson(f"k{i:02d}") for i in range(30)]


@pytest.mark.parametrize(("k", "included"), [(0, 10), (-5, 10), (100, 25), (25, 25), (3, 3)])
def test_k_is_clamped(k: int, included: int) -> None:
    result = match(THIRTY, SCOPE, MatchOptions(k=k))
    assert result.included_count == included
    assert len(result.included) == included
    assert result.matched_count == 30
    assert ids(result) == [f"k{i:02d}" for i in range(included)]


def test_opts_none_is_the_default_options() -> None:
    assert match(THIRTY, SCOPE, None) == match(THIRTY, SCOPE, MatchOptions())
    assert match(THIRTY, SCOPE).included_count == 10


def test_byte_budget_stops_at_first_overflow() -> None:
    candidates = [
        lesson(f"c{day}", created_at=f"2024-01-0{day}T00:00:00Z", form="x" * 100)
        for day in range(1, 6)
    ]
    result = match(shuffled(candidates), SCOPE, MatchOptions(byte_budget=250))
    assert ids(result) == ["c5", "c4"]
    assert (result.matched_count, result.included_count) == (5, 2)


def test_no_skip_and_continue_after_an_overflow() -> None:
    candidates = [
        lesson("a", form="x" * 100),
        lesson("b", form="x" * 200),
        lesson("c", form="x" * 10),  # 110 bytes would fit, but selection already stopped
    ]
    result = match(candidates, SCOPE, MatchOptions(byte_budget=250))
    assert ids(result) == ["a"]


def test_a_form_filling_the_budget_exactly_is_included() -> None:
    candidates = [lesson("a", form="x" * 100), lesson("b", form="x" * 150)]
    assert ids(match(candidates, SCOPE, MatchOptions(byte_budget=250))) == ["a", "b"]


@pytest.mark.parametrize("byte_budget", [0, -1])
def test_non_positive_byte_budget_means_4096(byte_budget: int) -> None:
    candidates = [lesson(f"b{i:02d}", form="x" * 320) for i in range(25)]
    result = match(candidates, SCOPE, MatchOptions(k=25, byte_budget=byte_budget))
    assert result.included_count == 12  # 12 × 320 = 3840 ≤ 4096 < 13 × 320


def test_empty_forms_cost_nothing_but_count_toward_k() -> None:
    candidates = [lesson(f"e{i:02d}", form="") for i in range(15)]
    result = match(candidates, SCOPE, MatchOptions(k=0, byte_budget=1))
    assert result.included_count == 10
    assert all(item.injection_form == "" for item in result.included)


def test_forms_are_charged_in_utf8_bytes() -> None:
    accented = [lesson("a", form="é" * 50), lesson("b", form="é" * 50)]  # 50 chars, 100 bytes
    assert ids(match(accented, SCOPE, MatchOptions(byte_budget=150))) == ["a"]
    emoji = [lesson("a", form="😀" * 2)]  # 8 bytes
    assert ids(match(emoji, SCOPE, MatchOptions(byte_budget=7))) == []
    assert ids(match(emoji, SCOPE, MatchOptions(byte_budget=8))) == ["a"]


def test_lone_surrogate_costs_three_bytes() -> None:
    candidates = [lesson("a", form="\ud800")]
    assert ids(match(candidates, SCOPE, MatchOptions(byte_budget=2))) == []
    assert ids(match(candidates, SCOPE, MatchOptions(byte_budget=3))) == ["a"]


def test_duplicate_entity_ids_are_kept() -> None:
    result = match([lesson("d", form="one"), lesson("d", form="two")], SCOPE)
    assert result.included == (MatchedLesson("d", "one"), MatchedLesson("d", "two"))
    assert result.matched_count == 2


def test_matched_count_counts_every_eligible_before_bounds() -> None:
    candidates = [*THIRTY, lesson("retired", status="retired"), lesson("x", applies_to=())]
    result = match(candidates, SCOPE, MatchOptions(k=3, byte_budget=2))
    assert (result.matched_count, result.included_count) == (30, 2)


def test_the_trace_names_the_64_ranked_first_ascending_and_every_match_when_fewer() -> None:
    # Severity first, so the ranking is not the ids' order: critical lessons are every third.
    many = shuffled(
        [lesson(f"m{n:03d}", severity=("info", "critical", "warning")[n % 3]) for n in range(100)]
    )
    result, traced = match_traced([*many, lesson("gone", status="retired")], SCOPE)
    critical = [f"m{n:03d}" for n in range(1, 100, 3)]
    warning = [f"m{n:03d}" for n in range(2, 100, 3)]
    assert TRACED_MATCHES == 64
    assert traced == tuple(sorted([*critical, *warning[: 64 - len(critical)]]))
    assert result == match(many, SCOPE)
    assert (result.matched_count, ids(result)) == (100, critical[:DEFAULT_K])
    few = many[:40]
    assert match_traced(few, SCOPE, MatchOptions(k=3))[1] == eligible_ids(few, SCOPE)


# --- eligibility ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entity_id", "matches"),
    [
        ("a.ops.x", True),
        ("a.ops", True),
        ("a.ops.x.y.z.1", True),
        ("a.ops-agent.x", False),
        ("a", False),
        ("b.a.ops", False),
        ("a.opsx", False),
        ("A.ops", False),
    ],
)
def test_id_keys_match_on_segment_boundaries(entity_id: str, matches: bool) -> None:
    candidates = [lesson("l", applies_to=("id:a.ops",))]
    result = match(candidates, Scope(entity_ids=(entity_id,)))
    assert result.matched_count == int(matches)


def test_empty_segments_are_kept_when_splitting() -> None:
    scope = Scope(entity_ids=("a..b",))
    assert match([lesson("l", applies_to=("id:a.",))], scope).matched_count == 1
    assert match([lesson("l", applies_to=("id:a..b",))], scope).matched_count == 1
    assert match([lesson("l", applies_to=("id:a.b",))], scope).matched_count == 0


def test_tag_keys_are_exact_and_case_sensitive() -> None:
    scope = Scope(tags=("x", "Ops"))
    assert match([lesson("l", applies_to=("tag:x",))], scope).matched_count == 1
    assert match([lesson("l", applies_to=("tag:X",))], scope).matched_count == 0
    assert match([lesson("l", applies_to=("tag:ops",))], scope).matched_count == 0
    assert match([lesson("l", applies_to=("tag:Ops",))], scope).matched_count == 1
    assert match([lesson("l", applies_to=("tag:x ",))], scope).matched_count == 0


@pytest.mark.parametrize("key", ["TAG:x", "Tag:x", "ID:a", "x", "a", "tag:", "id:", "id", ""])
def test_other_key_forms_are_ignored(key: str) -> None:
    scope = Scope(entity_ids=("a",), tags=("x", ""))
    assert match([lesson("l", applies_to=(key,))], scope).matched_count == 0


def test_any_matching_key_is_enough() -> None:
    candidates = [lesson("l", applies_to=("TAG:t", "id:nope", "tag:t"))]
    assert match(candidates, SCOPE).matched_count == 1


@pytest.mark.parametrize("status", ["Active", "ACTIVE", "active ", "", "retired", "proposed"])
def test_only_exact_active_status_is_eligible(status: str) -> None:
    assert match([lesson("l", status=status)], SCOPE).matched_count == 0


def test_empty_scope_matches_nothing() -> None:
    candidates = [lesson("l", applies_to=("tag:t", "id:a", "tag:", "id:"))]
    assert match(candidates, Scope()).matched_count == 0
    assert match(candidates, Scope(entity_ids=("",), tags=("",))).matched_count == 0


def test_lesson_without_keys_matches_nothing() -> None:
    assert match([lesson("l", applies_to=())], SCOPE).matched_count == 0


def test_no_candidates() -> None:
    assert match([], SCOPE) == MatchResult((), 0, 0)
    assert match(iter(()), SCOPE) == MatchResult((), 0, 0)


def test_candidates_may_be_any_iterable() -> None:
    result = match((lesson(f"g{i}") for i in range(3)), SCOPE)
    assert ids(result) == ["g0", "g1", "g2"]


# --- lookup_keys ----------------------------------------------------------------------------


def test_lookup_keys() -> None:
    scope = Scope(entity_ids=("a.b.c", "a.x", "", ".z", "q..r"), tags=("t", "", "T"))
    assert lookup_keys(scope) == frozenset(
        {
            "tag:t",
            "tag:T",
            "id:a",
            "id:a.b",
            "id:a.b.c",
            "id:a.x",
            "id:.z",
            "id:q",
            "id:q.",
            "id:q..r",
        }
    )
    assert lookup_keys(Scope()) == frozenset()


# --- RFC 3339 -------------------------------------------------------------------------------

EPOCH_2024 = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("2024-01-01T00:00:00Z", EPOCH_2024),
        ("2024-01-01T05:30:00+05:30", EPOCH_2024),
        ("2023-12-31T19:00:00-05:00", EPOCH_2024),
        ("2024-01-01T00:00:00-00:00", EPOCH_2024),
        ("2024-01-01T00:00:00.5Z", EPOCH_2024 + 500_000_000),
        ("2024-01-01T00:00:00.000000001Z", EPOCH_2024 + 1),
        ("2024-01-01T00:00:00.1234567899Z", EPOCH_2024 + 123_456_789),  # truncated, as Go
        ("1970-01-01T00:00:00Z", 0),
        ("0000-01-01T00:00:00Z", -62_167_219_200 * 10**9),
        ("2024-02-29T00:00:00Z", EPOCH_2024 + 59 * 86_400 * 10**9),
        ("2000-02-29T23:59:59Z", 951_868_799 * 10**9),
        ("2024-01-01T00:00:00+23:59", EPOCH_2024 - (23 * 3600 + 59 * 60) * 10**9),
    ],
)
def test_rfc3339_parses(text: str, nanos: int) -> None:
    assert parse_rfc3339(text) == nanos


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2024-01-01",
        "2024-01-01 00:00:00Z",
        "2024-01-01T00:00Z",
        "2024-01-01T00:00:00",
        "2024-01-01t00:00:00Z",
        "2024-01-01T00:00:00z",
        "2024-13-01T00:00:00Z",
        "2024-00-01T00:00:00Z",
        "2024-01-32T00:00:00Z",
        "2024-04-31T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2024-01-01T24:00:00Z",
        "2024-01-01T00:60:00Z",
        "2024-01-01T00:00:60Z",
        "2024-01-01T00:00:00+24:00",
        "2024-01-01T00:00:00+05:60",
        "2024-01-01T00:00:00+0530",
        "2024-01-01T00:00:00+05",
        "2024-01-01T00:00:00.Z",
        "2024-01-01T00:00:00,5Z",
        "2024-01-01T1:00:00Z",
        "24-01-01T00:00:00Z",
        "+2024-01-01T00:00:00Z",
        " 2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00Z ",
        "2024-01-01T00:00:00Z\n",
        "2024-01-01T00:00:00ZZ",
        "٢٠٢٤-01-01T00:00:00Z",
        "2024-01-01T00:00:00Z\ud800",
    ],
)
def test_rfc3339_rejects(text: str) -> None:
    assert parse_rfc3339(text) is None


# --- render ---------------------------------------------------------------------------------


def test_render_lesson_block_byte_for_byte() -> None:
    result = MatchResult(
        (MatchedLesson("a.ops.1", "Check the queue first."), MatchedLesson("b.x", "Ünïcødé")),
        matched_count=5,
        included_count=2,
    )
    assert render_lesson_block(result) == (
        "[Lessons \u2014 durable guidance distilled from prior work; matched 5, showing 2]\n"
        "- Check the queue first. (a.ops.1)\n"
        "- Ünïcødé (b.x)"
    )


def test_render_from_match() -> None:
    candidates = [lesson("w", severity="warning", form="warn"), lesson("c", form="crit")]
    block = render_lesson_block(match(candidates, SCOPE, MatchOptions(k=1)))
    assert block == (
        "[Lessons — durable guidance distilled from prior work; matched 2, showing 1]\n- crit (c)"
    )
    assert block.encode().count(b"\xe2\x80\x94") == 1  # U+2014 in UTF-8


def test_render_empty_form_keeps_the_line_shape() -> None:
    result = MatchResult((MatchedLesson("e", ""),), 1, 1)
    assert render_lesson_block(result).splitlines()[1] == "-  (e)"


def test_render_nothing_included_is_empty() -> None:
    assert render_lesson_block(MatchResult((), 0, 0)) == ""
    # Matched but none fitted: still nothing to render.
    too_big = match([lesson("a", form="x" * 10)], SCOPE, MatchOptions(byte_budget=5))
    assert (too_big.matched_count, too_big.included_count) == (1, 0)
    assert render_lesson_block(too_big) == ""
