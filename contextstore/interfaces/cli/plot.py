"""``plot_metrics``: one PNG that shows how a fleet's runs went over time.

matplotlib is an optional extra (``pip install 'contextstore[plot]'``); it is imported only when
a plot is drawn. The figure is rendered with the Agg canvas directly — no pyplot, no global
backend switch, no GUI — so it works in headless workers and in threads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextstore.errors import MissingExtraError

if TYPE_CHECKING:
    from contextstore.backends.sql.metrics.report import SeriesPoint


# Colours that stay distinguishable for the common forms of colour blindness (Okabe-Ito).
P50_COLOUR = "#0072B2"
P95_COLOUR = "#E69F00"
P99_COLOUR = "#D55E00"
GUARD_COLOUR = "#CC79A7"
RUNS_COLOUR = "#999999"
CACHE_COLOUR = "#F0E442"
MATCHED_COLOUR = "#009E73"
INCLUDED_COLOUR = "#56B4E9"

# Legends sit on the title row, right-aligned (titles are left-aligned), never over the data.
LEGEND: dict[str, Any] = {"loc": "lower right", "bbox_to_anchor": (1.0, 1.0), "frameon": False}

FIGURE_SIZE_INCHES = (11.0, 14.0)
FEW_BUCKETS = 8
"""Up to this many buckets, each gets a tick labelled with its full date and time."""
DPI = 110


def plot_metrics(
    series: Sequence[SeriesPoint], path: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """Draw ``series`` (from ``MetricsRepository.series``) as a PNG at ``path``; return the path.

    Five panels sharing a UTC time axis: runs per bucket (bars), response time p50/p95/p99
    (ms), cache hits (% of runs), guard failures (% of runs) and lessons matched vs included
    (mean per run). Each point is one bucket, placed at
    the bucket's start; a line breaks where buckets without runs lie between two points. An
    empty series still writes a PNG, with the axes labelled and a "no runs" note.

    Raises ``MissingExtraError`` (a ``ConfigurationError``) when matplotlib is not installed;
    ``OSError`` when ``path`` cannot be written (the file is replaced if it exists).
    """
    figure_class, canvas_class, dates = _matplotlib()
    points = sorted(series, key=lambda point: point.bucket_start)
    figure = figure_class(figsize=FIGURE_SIZE_INCHES, dpi=DPI, layout="constrained")
    canvas_class(figure)
    runs, latency, cache, guard, lessons = figure.subplots(
        5, 1, sharex=True, height_ratios=(0.8, 1.4, 1, 1, 1)
    )
    figure.suptitle(title or _default_title(points), fontsize=14, fontweight="bold")

    times = _with_gaps(points)
    runs.set_title("Runs per bucket", loc="left")
    if points:
        width = timedelta(seconds=points[0].bucket_seconds * 0.8)
        runs.bar(
            [point.bucket_start for point in points],
            [point.runs for point in points],
            width=width,
            color=RUNS_COLOUR,
        )
    runs.set_ylabel("runs")

    latency.set_title("Response time per run", loc="left")
    for label, attribute, colour, style in (
        ("p50 (median)", "p50_ms", P50_COLOUR, "-"),
        ("p95", "p95_ms", P95_COLOUR, "--"),
        ("p99", "p99_ms", P99_COLOUR, ":"),
    ):
        _line(latency, times, [_value(point, attribute) for point in times], style, colour, label)
    latency.set_ylabel("response time (ms)")
    latency.legend(**LEGEND, ncols=3)

    cache.set_title("Cache hits (share of runs served from the context cache)", loc="left")
    hits = [_percent(point, "cache_hit_rate") for point in times]
    _line(cache, times, hits, "-", CACHE_COLOUR, "cache hits")
    cache.set_ylabel("cache hits (%)")
    cache.set_ylim(0, 100)
    cache.legend(**LEGEND)

    guard.set_title("Guard failures (share of runs whose context failed the guard)", loc="left")
    failures = [_percent(point, "guard_failure_rate") for point in times]
    _line(guard, times, failures, "-", GUARD_COLOUR, "guard failures")
    guard.set_ylabel("guard failures (%)")
    # Scaled to the data (failures are usually a few percent) but never past 100 %.
    worst = max((_percent(point, "guard_failure_rate") for point in points), default=0.0)
    guard.set_ylim(0, min(100.0, max(5.0, math.ceil(worst * 1.2))))
    guard.legend(**LEGEND)

    lessons.set_title("Lessons per run: matched by scope vs included in the context", loc="left")
    for label, attribute, colour, style in (
        ("matched", "lessons_matched_mean", MATCHED_COLOUR, "-"),
        ("included", "lessons_included_mean", INCLUDED_COLOUR, "--"),
    ):
        _line(lessons, times, [_value(point, attribute) for point in times], style, colour, label)
    lessons.set_ylabel("lessons per run (mean)")
    lessons.set_xlabel("time (UTC)")
    lessons.legend(**LEGEND, ncols=2)

    for axes in (runs, latency, cache, guard, lessons):
        axes.grid(True, alpha=0.3)
        axes.spines[["top", "right"]].set_visible(False)
        if not points:
            axes.text(
                0.5,
                0.5,
                "no runs in this range",
                transform=axes.transAxes,
                ha="center",
                va="center",
                color="grey",
                fontsize=12,
            )
            # Without data the axes' ranges are arbitrary; ticks would only suggest values.
            axes.set_xticks([])
            axes.set_yticks([])
    for axes in (runs, latency, lessons):
        axes.set_ylim(bottom=0)
    if points:
        # Half a bucket of margin each side: the axis always spans the measured range (a
        # single bucket would otherwise get matplotlib's default of several years).
        margin = timedelta(seconds=points[0].bucket_seconds / 2)
        lessons.set_xlim(points[0].bucket_start - margin, points[-1].bucket_start + margin)
        _time_axis(lessons, points, dates)

    target = Path(path)
    figure.savefig(target, format="png")
    return target


def _time_axis(axes: Any, points: Sequence[SeriesPoint], dates: Any) -> None:
    """A few buckets: one tick at each bucket's start, its date (and time) in full. More: a
    handful of round instants, concisely. Either way every label says what instant it is;
    left to itself matplotlib marks the minute around one bucket by its seconds alone."""
    if len(points) <= FEW_BUCKETS:
        axes.set_xticks([point.bucket_start for point in points])
        whole_days = points[0].bucket_seconds % 86400 == 0
        pattern = "%Y-%m-%d" if whole_days else "%Y-%m-%d %H:%M"
        axes.xaxis.set_major_formatter(dates.DateFormatter(pattern, tz=UTC))
        return
    locator = dates.AutoDateLocator(tz=UTC, minticks=3, maxticks=8)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=UTC))


def _matplotlib() -> tuple[Any, Any, Any]:
    """(Figure, FigureCanvasAgg, matplotlib.dates), or ``MissingExtraError`` when missing."""
    try:
        import matplotlib.dates as dates
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError("Drawing a plot", "matplotlib", "plot") from exc
    return Figure, FigureCanvasAgg, dates


def _default_title(points: Sequence[SeriesPoint]) -> str:
    if not points:
        return "contextstore metrics — no runs"
    runs = sum(point.runs for point in points)
    start = points[0].bucket_start
    end = points[-1].bucket_start + timedelta(seconds=points[-1].bucket_seconds)
    return (
        f"contextstore metrics — {runs:,} runs, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
        f"UTC, {_duration(points[0].bucket_seconds)} buckets"
    )


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _with_gaps(points: Sequence[SeriesPoint]) -> list[SeriesPoint | datetime]:
    """The points, with a bare timestamp wherever empty buckets separate two of them.

    A bare timestamp plots as NaN, which makes matplotlib break the line there instead of
    drawing a misleading straight segment across a period with no runs.
    """
    result: list[SeriesPoint | datetime] = []
    for previous, point in zip([None, *points], points, strict=False):
        if previous is not None:
            step = timedelta(seconds=previous.bucket_seconds)
            if point.bucket_start - previous.bucket_start > step:
                result.append(previous.bucket_start + step)
        result.append(point)
    return result


def _line(
    axes: Any,
    times: Sequence[SeriesPoint | datetime],
    values: Sequence[float],
    style: str,
    colour: str,
    label: str,
) -> None:
    """One series in the house style: a line with small markers at each bucket."""
    xs = [_x(point) for point in times]
    axes.plot(xs, values, style, color=colour, marker="o", markersize=3, linewidth=1.8, label=label)


def _x(point: SeriesPoint | datetime) -> datetime:
    return point if isinstance(point, datetime) else point.bucket_start


def _value(point: SeriesPoint | datetime, attribute: str) -> float:
    if isinstance(point, datetime):
        return math.nan
    value = getattr(point, attribute)
    return math.nan if value is None else float(value)


def _percent(point: SeriesPoint | datetime, attribute: str) -> float:
    return 100.0 * _value(point, attribute)
