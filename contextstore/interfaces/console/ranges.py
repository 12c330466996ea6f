"""The time range an overview covers, and the bucket its charts use (pure; clock passed in).

Ranges are the last day, week or month, everything, or explicit UTC dates
(``since`` inclusive from its midnight, ``until`` exclusive from its midnight). Buckets are
chosen so a chart has at most ``MAX_BUCKETS`` bars, from a fixed ladder of lengths people
read easily (5 minutes … 1 week).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

from contextstore.errors import ValidationError

PRESETS: Final = {"24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
CHOICES: Final = (*PRESETS, "all", "dates")
DEFAULT: Final = "7d"
MAX_BUCKETS: Final = 48
BUCKET_LADDER: Final = (300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400)


@dataclass(frozen=True)
class Range:
    """``since``/``until`` as the reports take them (``None`` = unbounded), and its name."""

    choice: str
    since: datetime | None
    until: datetime | None
    since_text: str = ""
    until_text: str = ""


def _day(field: str, text: str) -> datetime | None:
    if not text:
        return None
    try:
        day = date.fromisoformat(text)
    except ValueError as exc:
        raise ValidationError(field, f"{text!r} is not a date (YYYY-MM-DD)") from exc
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def parse_range(choice: str, since: str, until: str, now: datetime) -> Range:
    """The range a form asked for; an unknown choice or a bad date is a ``ValidationError``."""
    choice = choice or DEFAULT
    if choice not in CHOICES:
        raise ValidationError("range", f"{choice!r} is not one of {', '.join(CHOICES)}")
    if choice in PRESETS:
        return Range(choice, now - PRESETS[choice], None)
    if choice == "all":
        return Range(choice, None, None)
    start = _day("since", since)
    end = _day("until", until)
    if start is not None and end is not None and start > end:
        raise ValidationError("since", "is after until")
    return Range(choice, start, end, since, until)


def bucket_seconds(first: datetime | None, last: datetime | None) -> int:
    """The shortest ladder length giving at most ``MAX_BUCKETS`` buckets from first to last."""
    if first is None or last is None or last <= first:
        return BUCKET_LADDER[0]
    span = (last - first).total_seconds()
    for length in BUCKET_LADDER:
        if math.floor(span / length) + 1 <= MAX_BUCKETS:
            return length
    weeks = math.ceil((span / BUCKET_LADDER[-1] + 1) / MAX_BUCKETS)
    return BUCKET_LADDER[-1] * weeks


def bucket_label(start: datetime, seconds: int) -> str:
    """How a bucket is named under a chart: the day for day buckets, else day and time."""
    if seconds >= 86400:
        return f"{start:%m-%d}"
    return f"{start:%d %H:%M}"
