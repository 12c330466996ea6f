"""plot_metrics: a real, readable PNG; a one-line error when matplotlib is missing."""

from __future__ import annotations

import struct
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contextstore.errors import ConfigurationError, MissingExtraError
from contextstore.plot import plot_metrics
from contextstore.sql.metrics import SeriesPoint

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
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
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


def test_an_empty_series_still_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "empty.png"
    plot_metrics([], target)
    png_size(target)


def test_a_single_bucket_plots(tmp_path: Path) -> None:
    target = tmp_path / "one.png"
    plot_metrics([point(3)], target)
    png_size(target)


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
