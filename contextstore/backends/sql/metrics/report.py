"""The figures ``MetricsRepository`` reports, and the one percentile definition they use.

Plain frozen values: no SQL here, so the command line, ``interfaces.cli.plot`` and callers can
use them without touching a database.

Percentiles use one definition everywhere — linear interpolation between closest ranks,
identical to PostgreSQL's ``percentile_cont`` and to numpy's default ``method="linear"``:
for ``n`` values sorted ascending ``v[0] ≤ … ≤ v[n-1]`` and a fraction ``p``, let
``pos = p * (n - 1)``, ``lo = floor(pos)``; the percentile is ``v[lo]`` when ``pos == lo``,
else ``v[lo] + (v[lo+1] - v[lo]) * (pos - lo)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypedDict

from contextstore.core.analysis import QueryComplexity
from contextstore.core.filters import Instant

__all__ = [
    "COMPLEXITY_ORDER",
    "EMPTY_FIGURES",
    "GROUPINGS",
    "PERCENTILES",
    "ComplexityRow",
    "GroupRow",
    "LessonStats",
    "LessonUsage",
    "MetricsFigures",
    "MetricsFilter",
    "MetricsFilterFields",
    "MetricsReport",
    "SeriesPoint",
    "figure_fields",
    "interpolate",
    "percentile",
]

PERCENTILES = (0.50, 0.95, 0.99)
"""The fractions reported as ``p50_ms``, ``p95_ms`` and ``p99_ms``."""

COMPLEXITY_ORDER = tuple(level.value for level in QueryComplexity)  # low, medium, high
"""The complexity levels a metric may have, in ``MetricsReport.by_complexity``'s order."""

GROUPINGS = ("complexity", "intent", "worker", "lesson")
"""What ``MetricsReport.groups`` may group runs by (``report(by=...)``)."""


@dataclass(frozen=True, kw_only=True)
class MetricsFilter:
    """Which runs a report, a series or lesson statistics cover; every field narrows.

    ``since`` (inclusive) and ``until`` (exclusive) are instants (a repository resolves
    ``"24h"``, ISO 8601 text or a ``timedelta`` to an aware ``datetime`` first, see
    ``contextstore.core.filters``); ``namespace`` matches exactly, ``complexity`` and
    ``intent`` their value (a repository takes them in any case); ``worker_prefix`` matches the
    workers starting with it, case-sensitively (``""`` matches all); ``cache_hit`` keeps the
    hits (``True``) or the misses (``False``); ``lesson`` keeps the runs whose block included
    that lesson id (runs recorded before traces existed name no lesson). ``None`` leaves a
    field unfiltered.
    """

    since: Instant | None = None
    until: Instant | None = None
    namespace: str | None = None
    worker_prefix: str | None = None
    complexity: str | None = None
    intent: str | None = None
    cache_hit: bool | None = None
    lesson: str | None = None


class MetricsFilterFields(TypedDict, total=False):
    """``MetricsFilter``'s fields as keywords, for the read methods that also take them so."""

    since: Instant | None
    until: Instant | None
    namespace: str | None
    worker_prefix: str | None
    complexity: str | None
    intent: str | None
    cache_hit: bool | None
    lesson: str | None


@dataclass(frozen=True, kw_only=True)
class MetricsFigures:
    """Summary figures of a set of runs.

    With no runs: ``runs`` and the ``*_total`` sums are ``0``; percentiles, means, rates and
    the first/last timestamps are ``None`` (undefined, rather than a misleading zero).
    Rates are fractions in ``[0, 1]``; times are milliseconds; lengths are characters.
    """

    runs: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_context_length: float | None
    guard_failure_rate: float | None
    cache_hit_rate: float | None
    lessons_matched_total: int
    lessons_matched_mean: float | None
    lessons_included_total: int
    lessons_included_mean: float | None
    first_recorded_at: datetime | None
    last_recorded_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings, nested rows as dicts."""
        result: dict[str, Any] = _jsonable(asdict(self))
        return result


@dataclass(frozen=True, kw_only=True)
class ComplexityRow(MetricsFigures):
    """The figures of the runs of one complexity (``low``, ``medium`` or ``high``)."""

    complexity: str


@dataclass(frozen=True, kw_only=True)
class SeriesPoint(MetricsFigures):
    """The figures of the runs recorded in ``[bucket_start, bucket_start + bucket_seconds)``."""

    bucket_start: datetime
    bucket_seconds: int


@dataclass(frozen=True, kw_only=True)
class MetricsReport(MetricsFigures):
    """Overall figures of the selected runs plus ``by_complexity``.

    ``by_complexity`` always holds ``low``, ``medium`` and ``high`` in that order (a level
    without runs has zero/``None`` figures), followed by any other level found in the table
    (rows written by hand in SQL), alphabetically. The filters that selected the runs are
    kept (in UTC): ``since`` is inclusive, ``until`` exclusive, ``None`` means unbounded.
    """

    by_complexity: tuple[ComplexityRow, ...]
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None
    worker_prefix: str | None = None
    complexity: str | None = None
    intent: str | None = None
    cache_hit: bool | None = None
    lesson: str | None = None
    by: str | None = None
    groups: tuple[GroupRow, ...] = ()


@dataclass(frozen=True, kw_only=True)
class GroupRow(MetricsFigures):
    """The figures of the runs sharing one value of ``MetricsReport.by``.

    Grouped by ``lesson``, a run counts once in the group of every lesson its block
    included, and runs that included none are in no group; so the groups' ``runs`` may sum
    to more or less than the report's.
    """

    key: str


@dataclass(frozen=True, kw_only=True)
class LessonUsage:
    """How the selected runs used one lesson.

    ``runs_matched``: runs that found it eligible; ``runs_included``: runs whose block
    included it; ``last_included_at``: the latest of those (``None`` if never included).
    ``status`` is the lesson's status now, ``None`` when it has been deleted since.
    """

    entity_id: str
    status: str | None
    runs_matched: int
    runs_included: int
    last_included_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class LessonStats:
    """Per-lesson usage over the selected runs, and the active lessons none of them included.

    ``lessons``: every lesson some selected run matched or included, most included first
    (then most matched, then entity id). ``unused``: the ids of the lessons active now that
    no selected run included, ascending. ``runs`` counts the selected runs.
    """

    runs: int
    lessons: tuple[LessonUsage, ...]
    unused: tuple[str, ...]
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings."""
        result: dict[str, Any] = _jsonable(asdict(self))
        return result


EMPTY_FIGURES = MetricsFigures(
    runs=0,
    p50_ms=None,
    p95_ms=None,
    p99_ms=None,
    mean_context_length=None,
    guard_failure_rate=None,
    cache_hit_rate=None,
    lessons_matched_total=0,
    lessons_matched_mean=None,
    lessons_included_total=0,
    lessons_included_mean=None,
    first_recorded_at=None,
    last_recorded_at=None,
)
"""The figures of no runs at all."""


def figure_fields(figures: MetricsFigures) -> dict[str, Any]:
    """The ``MetricsFigures`` fields of ``figures`` as keyword arguments (shallow)."""
    return {name: getattr(figures, name) for name in MetricsFigures.__dataclass_fields__}


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ascending ``sorted_values``, as ``percentile_cont``.

    ``None`` for an empty sequence; ``ValueError`` unless ``0 <= fraction <= 1``.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction!r}")
    if not sorted_values:
        return None
    ranks = {index: value for index, value in enumerate(sorted_values)}
    return interpolate(ranks, len(sorted_values), fraction)


def interpolate(ranks: Mapping[int, float], count: int, fraction: float) -> float:
    """PostgreSQL's ``percentile_cont`` arithmetic over 0-based ranks (``ranks`` may be sparse).

    Written exactly as PostgreSQL does it (``lo + (hi - lo) * proportion`` in doubles), so
    the result is bit-identical to the server's on the same values.
    """
    position = fraction * (count - 1)
    first = math.floor(position)
    low = float(ranks[first])
    if position == first:
        return low
    high = float(ranks[first + 1])
    return low + (high - low) * (position - first)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value
