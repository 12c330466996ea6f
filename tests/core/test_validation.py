"""The checks every value entering the library passes: text, integers, scopes, filters."""

from __future__ import annotations

import pytest

from contextstore.core.knowledge import (
    MAX_FILTER_KEY_LENGTH,
    MAX_FILTER_KEYS,
    MAX_FILTER_VALUES,
    validate_filters,
)
from contextstore.core.lessons import InMemoryLessons, LessonRecord
from contextstore.core.matching import Scope
from contextstore.core.validation import (
    MAX_SQL_INTEGER,
    check_count,
    check_integer,
    optional_storable_text,
    storable_text,
)
from contextstore.errors import ValidationError


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a\x00b", "contains a NUL character"),
        ("lone \ud800", "is not valid Unicode text (lone surrogate at position 5)"),
        (7, "must be a string, got int"),
        (None, "must be a string, got NoneType"),
    ],
)
def test_text_no_database_stores_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        storable_text(value, "entity_id")
    assert (raised.value.field, raised.value.message) == ("entity_id", message)


def test_storable_text_is_returned_as_it_is() -> None:
    text = "ESC \x1b, BEL \x07 and C1 \x9b are text a database stores"
    assert storable_text(text, "summary") is text
    assert optional_storable_text(None, "tag") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (MAX_SQL_INTEGER + 1, f"must be at most {MAX_SQL_INTEGER}, not {MAX_SQL_INTEGER + 1}"),
        (99999999999999999999, f"must be at most {MAX_SQL_INTEGER}, not 99999999999999999999"),
        (-1, "must be zero or more, not -1"),
        (True, "must be an integer, got True"),
        ("5", "must be an integer, got '5'"),
        (1.0, "must be an integer, got 1.0"),
    ],
)
def test_a_count_is_an_integer_a_bigint_holds(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        check_count(value, "limit")
    assert (raised.value.field, raised.value.message) == ("limit", message)


def test_the_bounds_themselves_are_accepted() -> None:
    assert check_count(0, "offset") == 0
    assert check_count(MAX_SQL_INTEGER, "offset") == MAX_SQL_INTEGER
    assert check_integer(-MAX_SQL_INTEGER, "top_k") == -MAX_SQL_INTEGER
    with pytest.raises(ValidationError) as raised:
        check_integer(-MAX_SQL_INTEGER - 1, "top_k")
    assert (
        raised.value.message == f"must be at least {-MAX_SQL_INTEGER}, not {-MAX_SQL_INTEGER - 1}"
    )


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({f"k{i}": 1 for i in range(1000)}, f"has 1000 keys; the limit is {MAX_FILTER_KEYS}"),
        (
            {"team": [f"t{i}" for i in range(MAX_FILTER_VALUES + 1)]},
            f"team: {MAX_FILTER_VALUES + 1} values; the limit is {MAX_FILTER_VALUES}",
        ),
        (
            {"n": 10**30},
            "n: 1000000000000000000000000000000 is wider than a 64-bit integer; give a float",
        ),
        ({"n": [1, -(2**63)]}, f"n: {-(2**63)} is wider than a 64-bit integer; give a float"),
        (
            {"k" * (MAX_FILTER_KEY_LENGTH + 1): 1},
            f"a key is {MAX_FILTER_KEY_LENGTH + 1} characters; the limit is 255",
        ),
        ({"k": "v\x00"}, "contains a NUL character"),
        ({"k\x00": "v"}, "contains a NUL character"),
    ],
)
def test_filters_beyond_their_bounds_are_refused(filters: object, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        validate_filters(filters)
    assert (raised.value.field, raised.value.message) == ("filters", message)


def test_filters_at_their_bounds_are_accepted() -> None:
    filters = {
        f"k{i}": [*range(MAX_FILTER_VALUES - 2), MAX_SQL_INTEGER, -MAX_SQL_INTEGER]
        for i in range(MAX_FILTER_KEYS)
    }
    checked = validate_filters(filters)
    assert len(checked) == MAX_FILTER_KEYS
    assert all(len(values) == MAX_FILTER_VALUES for values in checked.values())
    assert validate_filters({"n": 1e30}) == {"n": (1e30,)}


@pytest.mark.parametrize(
    ("scope", "field"),
    [
        (Scope(tags=tuple(f"t{i}" for i in range(70_001))), "scope.tags"),
        (Scope(tags=("ops\x00",)), "scope.tags"),
        (Scope(entity_ids=("a.\x00",)), "scope.entity_ids"),
    ],
)
def test_the_in_memory_source_applies_the_scope_bounds(scope: Scope, field: str) -> None:
    lessons = InMemoryLessons([LessonRecord("a.b", "x", status="active", applies_to=("tag:t1",))])
    with pytest.raises(ValidationError) as raised:
        lessons.candidates(scope)
    assert raised.value.field == field
