"""The two kinds of filter value every interface takes alike: a choice and an instant.

A choice (a complexity, an intent, a status, a severity…) is matched without regard to case
and refused, naming the field and every allowed value, when it is none of them: a filter
that matches nothing by a typing slip would look like "no runs" rather than a mistake.

An instant (``since``, ``until``, ``older_than``) is written the same way in Python, on the
command line and over HTTP: a duration back from now (``90s``, ``15m``, ``24h``, ``7d``,
``2w``, or a ``timedelta``), an ISO 8601 timestamp (``2026-05-01``,
``2026-05-01T12:00:00+02:00``; UTC when it has no offset), or an aware ``datetime`` (a
naive one is refused: in Python the zone is known to the caller, and guessing it would shift
a report by hours without a word).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final

from contextstore.errors import ValidationError

Instant = datetime | timedelta | str
"""What ``since``, ``until`` and ``older_than`` take: see the module's description."""

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION: Final = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.IGNORECASE)
INSTANT_FORMS: Final = (
    "a duration back from now (30m, 24h, 7d, 2w) or an ISO 8601 timestamp (UTC if no offset)"
)


def choice(field: str, value: object, allowed: Iterable[str]) -> str:
    """``value`` as the allowed spelling it matches ignoring case (and surrounding spaces);
    ``ValidationError`` naming ``field`` and listing every allowed value otherwise."""
    options = tuple(allowed)
    if isinstance(value, str):
        folded = value.strip().casefold()
        for option in options:
            if option.casefold() == folded:
                return option
    shown = repr(value) if isinstance(value, str) else type(value).__name__
    raise ValidationError(field, f"{shown} is not one of {', '.join(options)}")


def optional_choice(field: str, value: object, allowed: Iterable[str]) -> str | None:
    """``choice``, with ``None`` (no filter) left as it is."""
    return None if value is None else choice(field, value, allowed)


def duration(field: str, value: object) -> timedelta:
    """``24h``/``7d``… or a ``timedelta`` as a non-negative ``timedelta``."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValidationError(field, f"must not be negative, got {value}")
        return value
    found = DURATION.match(value) if isinstance(value, str) else None
    if found is None:
        raise ValidationError(field, f"expected a duration such as 30m, 24h or 7d, got {value!r}")
    try:
        return timedelta(seconds=int(found.group(1)) * UNITS[found.group(2).lower()])
    except OverflowError:
        return timedelta.max


def instant(field: str, value: object, now: datetime) -> datetime:
    """``value`` as an aware instant in UTC: ``now`` minus a duration, a timestamp's instant,
    or an aware ``datetime``. ``ValidationError`` naming ``field`` for anything else."""
    if isinstance(value, datetime):
        if _naive(value):
            raise ValidationError(field, "must be timezone-aware (naive datetimes are ambiguous)")
        return value.astimezone(UTC)
    if isinstance(value, timedelta) or (isinstance(value, str) and DURATION.match(value)):
        back = duration(field, value)
        try:
            return now.astimezone(UTC) - back
        except OverflowError:
            # Further back than year 1: every row is newer, as for the earliest instant.
            return datetime.min.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
        if moment is not None:
            try:
                return moment.replace(tzinfo=UTC) if _naive(moment) else moment.astimezone(UTC)
            except OverflowError:
                raise ValidationError(field, f"{value!r} is before year 1 in UTC") from None
        raise ValidationError(field, f"expected {INSTANT_FORMS}, got {value!r}")
    raise ValidationError(
        field, f"expected {INSTANT_FORMS}, a datetime or a timedelta, got {type(value).__name__}"
    )


def optional_instant(field: str, value: object, now: datetime) -> datetime | None:
    """``instant``, with ``None`` (no bound) left as it is."""
    return None if value is None else instant(field, value, now)


def _naive(moment: datetime) -> bool:
    return moment.tzinfo is None or moment.utcoffset() is None
