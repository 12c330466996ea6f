"""docs/design/matching.md: ``explain`` and the relevance order of the pure lesson matcher."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.matching import (
    Lesson,
    LessonExplanation,
    MatchedLesson,
    MatchOptions,
    MatchResult,
    Scope,
    eligible_ids,
    explain,
    match,
    parse_rfc3339,
)
from contextstore.errors import ValidationError

SCOPE = Scope(entity_ids=("fleet.ops.db",), tags=("ops",))


def lesson(
    entity_id: str,
    *,
    severity: str = "warning",
    created_at: str = "2024-01-01T00:00:00Z",
    applies_to: tuple[str, ...] = ("tag:ops",),
    form: str = "f",
    status: str = "active",
    summary: str = "",
) -> Lesson:
    return Lesson(entity_id, status, severity, created_at, applies_to, form, summary)


def ids(result: MatchResult) -> list[str]:
    return [item.entity_id for item in result.included]


# The matcher as it was before ``order`` existed, kept verbatim here so the default order is
# checked against it, not against itself.
_RANK = {"critical": 3, "warning": 2, "info": 1}


def original_match(candidates: Iterable[Lesson], scope: Scope, opts: MatchOptions) -> MatchResult:
    k = 10 if opts.k <= 0 else min(opts.k, 25)
    budget = 4096 if opts.byte_budget <= 0 else opts.byte_budget
    tags = frozenset(tag for tag in scope.tags if tag)
    segments = [eid.split(".") for eid in scope.entity_ids]

    def key_matches(key: str) -> bool:
        if key.startswith("tag:"):
            return key[4:] in tags
        if key.startswith("id:") and len(key) > 3:
            prefix = key[3:].split(".")
            return any(len(s) >= len(prefix) and s[: len(prefix)] == prefix for s in segments)
        return False

    def rank(item: Lesson) -> tuple[int, int, int, str]:
        instant = parse_rfc3339(item.created_at)
        dated = (0, -instant) if instant is not None else (1, 0)
        return (-_RANK.get(item.severity, 0), *dated, item.entity_id)

    eligible = [
        item
        for item in candidates
        if item.status == "active" and any(key_matches(key) for key in item.applies_to)
    ]
    eligible.sort(key=rank)
    included: list[MatchedLesson] = []
    used = 0
    for item in eligible:
        if len(included) >= k:
            break
        cost = len(item.injection_form.encode("utf-8", "surrogatepass"))
        if used + cost > budget:
            break
        used += cost
        included.append(MatchedLesson(item.entity_id, item.injection_form))
    return MatchResult(tuple(included), len(eligible), len(included))


# --- explain ---------------------------------------------------------------------------------


def test_explain_gives_every_candidate_its_reason_rank_and_exclusion() -> None:
    candidates = [
        lesson("z.retired", status="retired", applies_to=("tag:ops",)),
        lesson("y.other", applies_to=("tag:dev", "id:fleet.web")),
        lesson("a.crit", severity="critical", form="x" * 10, applies_to=("tag:ops", "tag:dev")),
        lesson("b.warn", form="x" * 10, applies_to=("id:fleet.ops",)),
        lesson("c.warn", form="x" * 10, created_at="2023-01-01T00:00:00Z"),
    ]
    explained = explain(candidates, SCOPE, MatchOptions(byte_budget=25))
    assert explained == (
        LessonExplanation("a.crit", ("tag:ops",), True, None, 1, True, None, None, 10),
        LessonExplanation("b.warn", ("id:fleet.ops",), True, None, 2, True, None, None, 10),
        LessonExplanation("c.warn", ("tag:ops",), True, None, 3, False, "byte_budget", None, 10),
        LessonExplanation(
            "z.retired", ("tag:ops",), False, "not active", None, False, None, None, 1
        ),
        LessonExplanation("y.other", (), False, "no key matches", None, False, None, None, 1),
    )


def test_explain_names_k_when_the_count_stopped_the_walk() -> None:
    candidates = [lesson(f"l{i}") for i in range(4)]
    explained = explain(candidates, SCOPE, MatchOptions(k=2))
    assert [(e.entity_id, e.included, e.excluded_by) for e in explained] == [
        ("l0", True, None),
        ("l1", True, None),
        ("l2", False, "k"),
        ("l3", False, "k"),
    ]


def test_explain_of_nothing_and_of_an_empty_scope() -> None:
    assert explain([], SCOPE) == ()
    (only,) = explain([lesson("a")], Scope())
    assert (only.eligible, only.reason, only.rank, only.matched_keys) == (
        False,
        "no key matches",
        None,
        (),
    )


def test_a_bad_order_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        MatchOptions(order="newest")
    assert caught.value.field == "order"


# --- relevance -------------------------------------------------------------------------------

FAILOVER_LESSONS = [
    lesson("ops.tls", summary="Rotate TLS certificates", form="Rotate TLS certs before expiry"),
    lesson("ops.redis", summary="Redis memory", form="Set maxmemory on every Redis node"),
    lesson("ops.dns", summary="DNS TTLs", form="Lower DNS TTLs a day before a migration"),
    lesson(
        "ops.pg.failover",
        summary="Postgres failover",
        form="Fail over Postgres with the runbook, never by hand",
        created_at="2020-01-01T00:00:00Z",
    ),
    lesson("ops.crit", severity="critical", summary="Backups", form="Test restores weekly"),
]
FAILOVER_QUERY = "How do I fail over Postgres?"


def test_relevance_puts_the_lesson_sharing_the_query_terms_first_within_its_severity() -> None:
    by_severity = match(FAILOVER_LESSONS, SCOPE)
    assert ids(by_severity) == ["ops.crit", "ops.dns", "ops.redis", "ops.tls", "ops.pg.failover"]
    relevant = match(FAILOVER_LESSONS, SCOPE, MatchOptions(order="relevance"), FAILOVER_QUERY)
    # Severity still comes first; within "warning" the failover lesson leads, the rest keep
    # the severity order (they score 0).
    assert ids(relevant) == ["ops.crit", "ops.pg.failover", "ops.dns", "ops.redis", "ops.tls"]
    explained = explain(FAILOVER_LESSONS, SCOPE, MatchOptions(order="relevance"), FAILOVER_QUERY)
    scores = {e.entity_id: e.relevance for e in explained}
    assert scores["ops.tls"] == scores["ops.redis"] == scores["ops.crit"] == 0.0
    assert scores["ops.pg.failover"] is not None and scores["ops.pg.failover"] > 0.0


def test_relevance_without_a_query_is_the_severity_order() -> None:
    options = MatchOptions(order="relevance")
    expected = ids(match(FAILOVER_LESSONS, SCOPE))
    # "how do i" is all stop words: they become the terms, and no lesson holds one.
    for query in (None, "", "how do i"):
        assert ids(match(FAILOVER_LESSONS, SCOPE, options, query)) == expected


def test_relevance_breaks_score_ties_by_newest_then_id() -> None:
    candidates = [
        lesson("b", summary="postgres", created_at="2024-01-01T00:00:00Z"),
        lesson("a", summary="postgres", created_at="2024-01-01T00:00:00Z"),
        lesson("c", summary="postgres", created_at="2025-01-01T00:00:00Z"),
    ]
    result = match(candidates, SCOPE, MatchOptions(order="relevance"), "postgres")
    assert ids(result) == ["c", "a", "b"]


def test_eligible_ids_are_sorted_and_count_as_matched() -> None:
    assert eligible_ids(FAILOVER_LESSONS, SCOPE) == (
        "ops.crit",
        "ops.dns",
        "ops.pg.failover",
        "ops.redis",
        "ops.tls",
    )
    assert eligible_ids([lesson("x", status="retired")], SCOPE) == ()


# --- properties ------------------------------------------------------------------------------

WORDS = st.sampled_from(["postgres", "fail", "over", "tls", "redis", "dns", "the", "how", "é"])
TEXT = st.lists(WORDS, max_size=6).map(" ".join) | st.text(max_size=20)
TIMESTAMPS = st.sampled_from(
    ["2024-01-01T00:00:00Z", "2024-01-01T05:30:00+05:30", "2023-06-01T00:00:00Z", "", "bad"]
)
KEYS = st.sampled_from(["tag:ops", "tag:dev", "id:fleet", "id:fleet.ops.db.x", "TAG:ops", "x"])
CANDIDATE = st.builds(
    lesson,
    st.text(min_size=1, max_size=6),
    severity=st.sampled_from(["critical", "warning", "info", "other"]),
    created_at=TIMESTAMPS,
    applies_to=st.lists(KEYS, max_size=3).map(tuple),
    form=TEXT,
    status=st.sampled_from(["active", "active", "retired", "Active"]),
    summary=TEXT,
)
OPTIONS = st.builds(
    MatchOptions,
    k=st.integers(-2, 30),
    byte_budget=st.integers(-2, 120),
    order=st.sampled_from(["severity", "relevance"]),
)
SCOPES = st.builds(
    Scope,
    entity_ids=st.lists(
        st.sampled_from(["fleet.ops.db", "fleet", "fleet.web", ""]), max_size=2
    ).map(tuple),
    tags=st.lists(st.sampled_from(["ops", "dev", ""]), max_size=2).map(tuple),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(CANDIDATE, max_size=12), SCOPES, OPTIONS, st.none() | TEXT)
def test_explain_and_match_never_disagree(
    candidates: list[Lesson], scope: Scope, options: MatchOptions, query: str | None
) -> None:
    result = match(candidates, scope, options, query)
    explained = explain(candidates, scope, options, query)
    assert len(explained) == len(candidates)
    included = [e for e in explained if e.included]
    assert [e.entity_id for e in included] == ids(result)
    assert [e.rank for e in included] == list(range(1, len(included) + 1))
    assert sum(e.eligible for e in explained) == result.matched_count
    for item in explained:
        assert item.eligible == (item.reason is None)
        assert item.eligible == (item.rank is not None)
        assert (item.excluded_by is not None) == (item.eligible and not item.included)
        assert (item.relevance is not None) == (item.eligible and options.order == "relevance")
    assert sorted(eligible_ids(candidates, scope)) == sorted(
        e.entity_id for e in explained if e.eligible
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(CANDIDATE, max_size=12, unique_by=lambda item: item.entity_id),
    SCOPES,
    OPTIONS,
    st.none() | TEXT,
    st.randoms(use_true_random=False),
)
def test_every_order_is_invariant_under_shuffling_the_candidates(
    candidates: list[Lesson],
    scope: Scope,
    options: MatchOptions,
    query: str | None,
    rnd: random.Random,
) -> None:
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert match(shuffled, scope, options, query) == match(candidates, scope, options, query)
    ranked = [e for e in explain(candidates, scope, options, query) if e.eligible]
    again = [e for e in explain(shuffled, scope, options, query) if e.eligible]
    assert ranked == again


@settings(max_examples=400, deadline=None)
@given(st.lists(CANDIDATE, max_size=12), SCOPES, OPTIONS, st.none() | TEXT)
def test_the_default_order_is_the_documented_one(
    candidates: list[Lesson], scope: Scope, options: MatchOptions, query: str | None
) -> None:
    severity = MatchOptions(options.k, options.byte_budget)
    expected = original_match(candidates, scope, severity)
    assert match(candidates, scope, severity, query) == expected
    assert match(candidates, scope, severity) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(CANDIDATE, max_size=12, unique_by=lambda item: item.entity_id),
    SCOPES,
    st.none() | TEXT,
)
def test_relevance_reorders_only_within_one_severity(
    candidates: list[Lesson], scope: Scope, query: str | None
) -> None:
    by_id = {c.entity_id: _RANK.get(c.severity, 0) for c in candidates}
    relevant = explain(candidates, scope, MatchOptions(order="relevance"), query)
    plain = explain(candidates, scope, MatchOptions(), query)
    levels = [by_id[e.entity_id] for e in relevant if e.eligible]
    assert levels == [by_id[e.entity_id] for e in plain if e.eligible]
    assert levels == sorted(levels, reverse=True)
