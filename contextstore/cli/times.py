"""Times on the command line: a duration back from now or an ISO 8601 timestamp.

``90s``, ``15m``, ``1h``, ``7d``, ``2w`` mean that long before now; ``2024-05-01`` or
``2024-05-01T12:00:00+02:00`` is an instant (UTC when it has no offset). A value that is
neither is a usage error: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from contextstore.cli.common import EXIT_USAGE, fail

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.IGNORECASE)
TIME_HELP = "a duration back from now (30m, 1h, 7d, 2w) or an ISO 8601 timestamp (UTC if no offset)"

Since = Annotated[
    str | None,
    typer.Option("--since", help=f"Only runs recorded at or after this: {TIME_HELP}"),
]
Until = Annotated[
    str | None,
    typer.Option("--until", help=f"Only runs recorded before this: {TIME_HELP}"),
]


def parse_time(option: str, text: str | None, now: datetime) -> datetime | None:
    """``now - duration`` for ``30m``/``1h``/``7d``…, else the ISO timestamp; ``None`` stays."""
    if text is None:
        return None
    match = DURATION.match(text)
    if match:
        try:
            return now - timedelta(seconds=int(match.group(1)) * UNITS[match.group(2).lower()])
        except OverflowError:
            # Further back than year 1: every row is newer, as for the earliest instant.
            return datetime.min.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(text.strip())
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):
        fail(f"{option}: expected {TIME_HELP}, got {text!r}", code=EXIT_USAGE)


def parse_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """``--since``/``--until`` as instants, refusing a range that ends before it starts."""
    now = datetime.now(UTC)
    start = parse_time("--since", since, now)
    end = parse_time("--until", until, now)
    if start is not None and end is not None and start > end:
        fail(f"--since ({when(start)}) is after --until ({when(end)})", code=EXIT_USAGE)
    return start, end


def when(moment: datetime | None) -> str | None:
    return None if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"
