"""Times on the command line: a duration back from now or an ISO 8601 timestamp.

``90s``, ``15m``, ``1h``, ``7d``, ``2w`` mean that long before now; ``2024-05-01`` or
``2024-05-01T12:00:00+02:00`` is an instant (UTC when it has no offset). The library reads
them (``contextstore.core.filters``), as it does the same values given in Python or over
HTTP; one it refuses is a usage error: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from contextstore.core.filters import DURATION, UNITS, instant
from contextstore.core.filters import INSTANT_FORMS as TIME_HELP
from contextstore.errors import ValidationError
from contextstore.interfaces.cli.common import EXIT_USAGE, fail

__all__ = ["DURATION", "TIME_HELP", "UNITS", "Since", "Until", "parse_range", "parse_time"]

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
    try:
        return instant(option, text, now)
    except ValidationError as refused:
        fail(f"{option}: {refused.message}", code=EXIT_USAGE)


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
