"""Property tests for the lesson matcher: it never raises, is order-independent, and agrees
with ``lookup_keys`` (the index storage uses to find candidates)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.matching import (
    Lesson,
    MatchOptions,
    Scope,
    lookup_keys,
    match,
    parse_rfc3339,
    render_lesson_block,
)

# Every code point, lone surrogates included.
ANY_TEXT = st.text(st.characters(), max_size=60)
HUGE_TEXT = st.sampled_from(["", "x" * 100_000, "é" * 40_000, "\ud800" * 5_000, "مرحبا" * 3000])
STATUS = st.sampled_from(["active", "Active", "retired", ""]) | ANY_TEXT
SEVERITY = st.sampled_from(["critical", "warning", "info", "", "CRITICAL"]) | ANY_TEXT
TIMESTAMP = (
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat(timespec="microseconds"))
    | st.sampled_from(["", "2024-01-01T00:00:00Z", "2024-01-01T05:30:00+05:30", "2024-01-01"])
    | ANY_TEXT
)
KEY = (
    st.builds(lambda t: f"tag:{t}", ANY_TEXT) | st.builds(lambda t: f"id:{t}", ANY_TEXT) | ANY_TEXT
)
FORM = ANY_TEXT | HUGE_TEXT

LESSONS = st.builds(
    Lesson,
    entity_id=ANY_TEXT,
    status=STATUS,
    severity=SEVERITY,
    created_at=TIMESTAMP,
    applies_to=st.lists(KEY, max_size=4).map(tuple),
    injection_form=FORM,
)
SCOPES = st.builds(
    Scope,
    entity_ids=st.lists(ANY_TEXT | HUGE_TEXT, max_size=4).map(tuple),
    tags=st.lists(ANY_TEXT, max_size=4).map(tuple),
)
OPTIONS = st.builds(
    MatchOptions, k=st.integers(-(2**70), 2**70), byte_budget=st.integers(-(2**70), 2**70)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LESSONS, max_size=12), SCOPES, st.none() | OPTIONS)
def test_match_render_and_lookup_keys_never_raise(
    candidates: list[Lesson], scope: Scope, opts: MatchOptions | None
) -> None:
    result = match(candidates, scope, opts)
    assert result.included_count == len(result.included) <= result.matched_count
    assert result.included_count <= 25
    block = render_lesson_block(result)
    assert (block == "") == (result.included_count == 0)
    assert isinstance(lookup_keys(scope), frozenset)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(LESSONS, max_size=10, unique_by=lambda lesson: lesson.entity_id).flatmap(
        lambda lessons: st.tuples(st.just(lessons), st.permutations(lessons))
    ),
    OPTIONS,
)
def test_match_ignores_candidate_order_with_distinct_ids(
    pair: tuple[list[Lesson], list[Lesson]], opts: MatchOptions
) -> None:
    original, permuted = pair
    # A scope every generated key could hit is unlikely, so match on the lessons' own keys.
    scope = Scope(
        entity_ids=tuple(k[3:] for lesson in original for k in lesson.applies_to if k[:3] == "id:"),
        tags=tuple(k[4:] for lesson in original for k in lesson.applies_to if k[:4] == "tag:"),
    )
    assert match(original, scope, opts) == match(permuted, scope, opts)


SMALL_ID = st.text(alphabet="ab.", max_size=6)
SMALL_KEY = (
    st.builds(lambda t: f"id:{t}", SMALL_ID)
    | st.builds(lambda t: f"tag:{t}", st.text(alphabet="ab", max_size=2))
    | st.sampled_from(["TAG:a", "ID:a", "a", "", "tag:", "id:"])
)
SMALL_LESSONS = st.builds(
    Lesson,
    entity_id=SMALL_ID,
    status=st.sampled_from(["active", "Active", "retired"]),
    severity=st.just("info"),
    created_at=st.just(""),
    applies_to=st.lists(SMALL_KEY, max_size=4).map(tuple),
    injection_form=st.just(""),
)
SMALL_SCOPES = st.builds(
    Scope,
    entity_ids=st.lists(SMALL_ID, max_size=3).map(tuple),
    tags=st.lists(st.text(alphabet="ab", max_size=2), max_size=3).map(tuple),
)


@settings(max_examples=1000, deadline=None)
@given(SMALL_LESSONS, SMALL_SCOPES)
def test_eligibility_equals_sharing_a_lookup_key(lesson: Lesson, scope: Scope) -> None:
    eligible = match([lesson], scope).matched_count == 1
    indexed = lesson.status == "active" and bool(set(lesson.applies_to) & lookup_keys(scope))
    assert eligible == indexed


OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))


@settings(max_examples=500, deadline=None)
@given(st.datetimes(timezones=OFFSETS))
def test_rfc3339_agrees_with_datetime_on_valid_timestamps(moment: datetime) -> None:
    text = moment.isoformat(timespec="microseconds")
    expected = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert parse_rfc3339(text) == expected * 1000
    assert parse_rfc3339(text.replace("+00:00", "Z")) == expected * 1000
