"""plot_metrics: a real, readable PNG; a one-line error when matplotlib is missing."""

from __future__ import annotations

import struct
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from contextstore.backends.sql.metrics import SeriesPoint
from contextstore.errors import ConfigurationError, MissingExtraError
from contextstore.interfaces.cli.plot import plot_metrics
from tests.plotted import capture_figures, hours, panels, span

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def point(hour: int, runs: int = 10, p50: float = 100.0, failures: float = 0.1) -> SeriesPoint:
    return SeriesPoint(
        bucket_start=T0 + timedelta(hours=hour),
        bucket_seconds=3600,
        runs=runs,
        p50_ms=p50,
        p95_ms=p50 * 2.5,
        p99_ms=p50 * 4,
        mean_context_length=1500.0,
        guard_failure_rate=failures,
        cache_hit_rate=0.3,
        lessons_matched_total=runs * 4,
        lessons_matched_mean=4.0,
        lessons_included_total=runs * 2,
        lessons_included_mean=2.0,
        first_recorded_at=T0 + timedelta(hours=hour),
        last_recorded_at=T0 + timedelta(hours=hour, minutes=59),
    )


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a complete PNG: signature, header and end chunk, and it decodes."""
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    assert pixels.std() > 0  # not a blank canvas
    return width, height


def test_plot_writes_a_valid_png_of_reasonable_size(tmp_path: Path) -> None:
    series = [point(hour, p50=80 + 10 * hour, failures=0.02 * hour) for hour in range(12)]
    series.pop(5)  # a bucket without runs: the lines break there
    target = tmp_path / "metrics.png"
    assert plot_metrics(series, target) == target
    width, height = png_size(target)
    assert 800 <= width <= 2000 and 800 <= height <= 2000
    assert 20_000 < target.stat().st_size < 2_000_000


def test_plot_draws_the_promised_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = capture_figures(monkeypatch)
    drawn = [point(0, runs=8), point(1, runs=12)]
    plot_metrics(drawn, tmp_path / "labels.png")
    (figure,) = saved
    runs, latency, cache, guard, lessons = figure.axes
    assert runs.get_ylabel() == "runs"
    assert [bar.get_height() for bar in runs.patches] == [8, 12]
    assert latency.get_ylabel() == "response time (ms)"
    assert cache.get_ylabel() == "cache hits (%)"
    (hits,) = cache.get_lines()
    assert list(hits.get_ydata()) == [100.0 * p.cache_hit_rate for p in drawn]
    assert guard.get_ylabel() == "guard failures (%)"
    assert lessons.get_xlabel() == "time (UTC)"
    latency_legend, lessons_legend = latency.get_legend(), lessons.get_legend()
    assert latency_legend is not None and lessons_legend is not None
    assert [text.get_text() for text in latency_legend.get_texts()] == [
        "p50 (median)",
        "p95",
        "p99",
    ]
    assert [text.get_text() for text in lessons_legend.get_texts()] == [
        "matched",
        "included",
    ]
    assert all(axes.get_title(loc="left") for axes in figure.axes)
    assert "20 runs" in figure.get_suptitle()


def figures(
    hour: int, runs: int, latency: tuple[float, float, float], *rates: float
) -> SeriesPoint:
    """A point whose every drawn figure is given: (p50, p95, p99), then cache-hit rate,
    guard-failure rate, lessons matched and included per run."""
    cache, guard, matched, included = rates
    return SeriesPoint(
        bucket_start=T0 + timedelta(hours=hour),
        bucket_seconds=3600,
        runs=runs,
        p50_ms=latency[0],
        p95_ms=latency[1],
        p99_ms=latency[2],
        mean_context_length=1000.0,
        guard_failure_rate=guard,
        cache_hit_rate=cache,
        lessons_matched_total=int(runs * matched),
        lessons_matched_mean=matched,
        lessons_included_total=int(runs * included),
        lessons_included_mean=included,
        first_recorded_at=T0 + timedelta(hours=hour),
        last_recorded_at=T0 + timedelta(hours=hour, minutes=59),
    )


def test_each_panel_shows_the_series_of_known_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = capture_figures(monkeypatch)
    series = [
        figures(0, 8, (100.0, 250.0, 400.0), 0.25, 0.0, 4.0, 2.0),
        figures(1, 12, (120.0, 300.0, 480.0), 0.5, 0.125, 3.5, 1.5),
        figures(2, 4, (90.0, 200.0, 260.0), 0.0, 0.25, 5.0, 3.0),
        # no runs at hour 3: every line breaks there (a NaN point)
        figures(4, 10, (110.0, 210.0, 350.0), 0.1, 0.1, 2.0, 2.0),
    ]
    plot_metrics(list(reversed(series)), tmp_path / "known.png")  # any order: sorted by time
    (figure,) = saved
    assert figure.get_suptitle() == (
        "contextstore metrics — 34 runs, 2026-03-01 00:00 to 2026-03-01 05:00 UTC, 1 h buckets"
    )
    at = hours(T0, 0, 1, 2, 3, 4)
    gap = None

    def line(*values: float | None) -> list[tuple[Any, float | None]]:
        return list(zip(at, values, strict=True))

    runs, latency, cache, guard, lessons = panels(figure)
    assert runs == {
        "title": "Runs per bucket",
        "ylabel": "runs",
        "xlabel": "",
        "ylim": runs["ylim"],
        "legend": [],
        "bars": list(zip(hours(T0, 0, 1, 2, 4), [8, 12, 4, 10], strict=True)),
        "lines": {},
        "notes": [],
    }
    assert runs["ylim"][0] == 0 and runs["ylim"][1] >= 12
    assert latency["title"] == "Response time per run"
    assert latency["ylabel"] == "response time (ms)"
    assert latency["legend"] == ["p50 (median)", "p95", "p99"]
    assert latency["lines"] == {
        "p50 (median)": line(100.0, 120.0, 90.0, gap, 110.0),
        "p95": line(250.0, 300.0, 200.0, gap, 210.0),
        "p99": line(400.0, 480.0, 260.0, gap, 350.0),
    }
    assert latency["ylim"][0] == 0 and latency["ylim"][1] >= 480
    assert cache["title"] == "Cache hits (share of runs served from the context cache)"
    assert (cache["ylabel"], cache["ylim"], cache["legend"]) == (
        "cache hits (%)",
        (0.0, 100.0),
        ["cache hits"],
    )
    assert cache["lines"] == {"cache hits": line(25.0, 50.0, 0.0, gap, 10.0)}
    assert guard["title"] == "Guard failures (share of runs whose context failed the guard)"
    # scaled to the worst bucket (25 %) plus a fifth: 30 %
    assert (guard["ylabel"], guard["ylim"], guard["legend"]) == (
        "guard failures (%)",
        (0.0, 30.0),
        ["guard failures"],
    )
    assert guard["lines"] == {"guard failures": line(0.0, 12.5, 25.0, gap, 10.0)}
    assert lessons["title"] == "Lessons per run: matched by scope vs included in the context"
    assert (lessons["ylabel"], lessons["xlabel"], lessons["legend"]) == (
        "lessons per run (mean)",
        "time (UTC)",
        ["matched", "included"],
    )
    assert lessons["lines"] == {
        "matched": line(4.0, 3.5, 5.0, gap, 2.0),
        "included": line(2.0, 1.5, 3.0, gap, 2.0),
    }
    # half a bucket of margin each side of the measured range
    assert span(figure) == (T0 - timedelta(minutes=30), T0 + timedelta(hours=4, minutes=30))


def test_an_empty_series_still_writes_a_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = capture_figures(monkeypatch)
    target = tmp_path / "empty.png"
    plot_metrics([], target)
    png_size(target)
    (figure,) = saved
    assert figure.get_suptitle() == "contextstore metrics — no runs"
    described = panels(figure)
    assert [p["ylabel"] for p in described] == [
        "runs",
        "response time (ms)",
        "cache hits (%)",
        "guard failures (%)",
        "lessons per run (mean)",
    ]
    for panel in described:
        assert panel["notes"] == ["no runs in this range"]
        assert panel["bars"] == []
        assert all(points == [] for points in panel["lines"].values())
    assert all(not axes.get_xticks().size and not axes.get_yticks().size for axes in figure.axes)


def test_a_single_bucket_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = capture_figures(monkeypatch)
    target = tmp_path / "one.png"
    plot_metrics([point(3, runs=7, p50=40.0)], target)
    png_size(target)
    (figure,) = saved
    runs, latency, *_ = panels(figure)
    start = T0 + timedelta(hours=3)
    assert runs["bars"] == [(start, 7)]
    assert latency["lines"]["p50 (median)"] == [(start, 40.0)]
    assert latency["lines"]["p99"] == [(start, 160.0)]
    # one bucket still spans that bucket, not matplotlib's default of years
    assert span(figure) == (start - timedelta(minutes=30), start + timedelta(minutes=30))


def test_an_unwritable_path_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        plot_metrics([point(0)], tmp_path / "missing" / "plot.png")


def test_missing_matplotlib_is_a_configuration_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes "import matplotlib" fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigurationError) as caught:
        plot_metrics([point(0)], tmp_path / "never.png")
    assert isinstance(caught.value, MissingExtraError)
    assert str(caught.value) == (
        "Drawing a plot needs matplotlib, which is not installed: pip install 'contextstore[plot]'"
    )
    assert not (tmp_path / "never.png").exists()


def time_labels(figure: Any) -> list[str]:
    """The time axis' tick labels as drawn (the bottom panel carries them for all five)."""
    figure.canvas.draw()
    return [label.get_text() for label in figure.axes[-1].get_xticklabels() if label.get_text()]


def test_one_minute_bucket_is_labelled_with_its_date_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = capture_figures(monkeypatch)
    start = T0 + timedelta(hours=4, minutes=36)
    plot_metrics([replace(point(0), bucket_start=start, bucket_seconds=60)], tmp_path / "m.png")
    # Not "30 40 50 04:36 10 20": seconds around the bucket, most without their minute.
    assert time_labels(saved[0]) == ["2026-03-01 04:36"]


@pytest.mark.parametrize(
    ("seconds", "count", "expected"),
    [
        (3600, 3, ["2026-03-01 00:00", "2026-03-01 01:00", "2026-03-01 02:00"]),
        (86400, 2, ["2026-03-01", "2026-03-02"]),
    ],
)
def test_a_few_buckets_are_labelled_one_tick_each(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    seconds: int,
    count: int,
    expected: list[str],
) -> None:
    saved = capture_figures(monkeypatch)
    drawn = [
        replace(point(0), bucket_start=T0 + timedelta(seconds=seconds * i), bucket_seconds=seconds)
        for i in range(count)
    ]
    plot_metrics(drawn, tmp_path / "few.png")
    assert time_labels(saved[0]) == expected


def test_many_buckets_get_few_labels_that_do_not_touch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = capture_figures(monkeypatch)
    plot_metrics([point(hour) for hour in range(72)], tmp_path / "many.png")
    (figure,) = saved
    labels = time_labels(figure)
    assert 3 <= len(labels) <= 12
    renderer = figure.canvas.get_renderer()
    boxes = [
        label.get_window_extent(renderer)
        for label in figure.axes[-1].get_xticklabels()
        if label.get_text()
    ]
    assert all(left.x1 < right.x0 for left, right in pairwise(boxes))
