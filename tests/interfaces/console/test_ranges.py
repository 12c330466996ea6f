"""The overview's ranges and chart buckets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.errors import ValidationError
from contextstore.interfaces.console.ranges import (
    BUCKET_LADDER,
    MAX_BUCKETS,
    Range,
    bucket_label,
    bucket_seconds,
    parse_range,
)

NOW = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def test_presets_dates_and_everything() -> None:
    assert parse_range("", "", "", NOW) == Range("7d", NOW - timedelta(days=7), None)
    assert parse_range("24h", "2020-01-01", "", NOW) == Range("24h", NOW - timedelta(days=1), None)
    assert parse_range("all", "", "", NOW) == Range("all", None, None)
    assert parse_range("dates", "2026-01-02", "2026-01-03", NOW) == Range(
        "dates",
        datetime(2026, 1, 2, tzinfo=UTC),
        datetime(2026, 1, 3, tzinfo=UTC),
        "2026-01-02",
        "2026-01-03",
    )
    assert parse_range("dates", "", "", NOW) == Range("dates", None, None)


def test_bad_ranges_name_their_field() -> None:
    for args, field in (
        (("week", "", ""), "range"),
        (("dates", "yesterday", ""), "since"),
        (("dates", "", "2026-13-01"), "until"),
        (("dates", "2026-02-02", "2026-02-01"), "since"),
    ):
        with pytest.raises(ValidationError) as caught:
            parse_range(*args, NOW)
        assert caught.value.field == field


@given(st.integers(min_value=0, max_value=10 * 365 * 86400))
def test_buckets_keep_charts_short(span: int) -> None:
    size = bucket_seconds(NOW, NOW + timedelta(seconds=span))
    assert span // size + 1 <= MAX_BUCKETS
    if size in BUCKET_LADDER and size != BUCKET_LADDER[0]:
        smaller = BUCKET_LADDER[BUCKET_LADDER.index(size) - 1]
        assert span // smaller + 1 > MAX_BUCKETS


def test_bucket_edges() -> None:
    assert bucket_seconds(None, NOW) == 300
    assert bucket_seconds(NOW, NOW) == 300
    assert bucket_seconds(NOW, NOW + timedelta(days=1)) == 3600
    assert bucket_seconds(NOW, NOW + timedelta(days=7)) == 6 * 3600
    assert bucket_seconds(NOW, NOW + timedelta(days=30)) == 86400
    assert bucket_label(NOW, 3600) == "06 07:08"
    assert bucket_label(NOW, 86400) == "05-06"
