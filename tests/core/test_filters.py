"""One reading of filter values for Python, the command line and HTTP: choices in any case,
refused with the allowed values listed; instants as durations, ISO 8601 text, datetimes or
timedeltas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from contextstore.core.filters import choice, duration, instant, optional_choice
from contextstore.errors import ValidationError

NOW = datetime(2026, 5, 10, 12, 0, tzinfo=UTC)
LEVELS = ("low", "medium", "high")


def test_a_choice_ignores_case_and_spaces_and_keeps_the_stored_spelling() -> None:
    assert choice("complexity", "HIGH", LEVELS) == "high"
    assert choice("complexity", " Medium ", LEVELS) == "medium"
    assert optional_choice("complexity", None, LEVELS) is None


@pytest.mark.parametrize("value", ["procedurall", "", 3, None])
def test_an_unknown_choice_names_the_field_and_every_allowed_value(value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        choice("complexity", value, LEVELS)
    assert refused.value.field == "complexity"
    assert refused.value.message.endswith("is not one of low, medium, high")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("24h", NOW - timedelta(hours=24)),
        ("7D", NOW - timedelta(days=7)),
        (" 90s ", NOW - timedelta(seconds=90)),
        ("2w", NOW - timedelta(weeks=2)),
        (timedelta(minutes=5), NOW - timedelta(minutes=5)),
        ("2026-05-01", datetime(2026, 5, 1, tzinfo=UTC)),
        ("2026-05-01T12:00:00+02:00", datetime(2026, 5, 1, 10, tzinfo=UTC)),
        (
            datetime(2026, 5, 1, 14, tzinfo=timezone(timedelta(hours=2))),
            datetime(2026, 5, 1, 12, tzinfo=UTC),
        ),
        ("99999999999w", datetime.min.replace(tzinfo=UTC)),
    ],
)
def test_every_form_of_an_instant(value: object, expected: datetime) -> None:
    found = instant("since", value, NOW)
    assert found == expected
    assert found.tzinfo == UTC


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "expected a duration back from now"),
        ("24 hours", "expected a duration back from now"),
        (datetime(2026, 5, 1), "must be timezone-aware"),
        (timedelta(seconds=-1), "must not be negative"),
        (12, "got int"),
    ],
)
def test_what_is_no_instant_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        instant("until", value, NOW)
    assert refused.value.field == "until"
    assert message in refused.value.message


def test_a_duration_alone() -> None:
    assert duration("bucket", "5m") == timedelta(minutes=5)
    with pytest.raises(ValidationError, match="older_than: expected a duration"):
        duration("older_than", "soon")
