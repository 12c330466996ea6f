"""``metrics report --plot`` draws what SQL holds: known runs in, exact figures on each panel,
on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.interfaces.cli import app
from tests.factories import make_metric
from tests.plotted import capture_figures, hours, panels, span

T0 = datetime(2026, 3, 1, tzinfo=UTC)
# (minutes after T0, response ms, cache hit, guard passed, lessons matched, included)
RUNS = [
    (10, 100.0, False, True, 4, 2),
    (40, 300.0, True, False, 6, 3),
    (80, 50.0, True, True, 2, 1),
    (185, 900.0, False, False, 5, 5),
]


def test_the_plot_shows_the_runs_stored_in_sql(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_database_engine(database_url)
    MetricsRepository(engine).record_many(
        make_metric(
            T0 + timedelta(minutes=minutes),
            response_ms=ms,
            cache_hit=hit,
            guard_passed=passed,
            lessons_matched=matched,
            lessons_included=included,
        )
        for minutes, ms, hit, passed, matched, included in RUNS
    )
    engine.dispose()
    saved = capture_figures(monkeypatch)
    target = tmp_path / "fleet.png"
    result = CliRunner().invoke(
        app,
        [
            "metrics",
            "report",
            "--all-namespaces",
            "--database-url",
            database_url,
            "--since",
            "2026-03-01T00:00:00",
            "--until",
            "2026-03-02T00:00:00",
            "--bucket",
            "1h",
            "--plot",
            str(target),
        ],
    )
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (figure,) = saved
    assert figure.get_suptitle() == (
        "contextstore metrics — 4 runs, 2026-03-01 00:00 to 2026-03-01 04:00 UTC, 1 h buckets"
    )
    at = hours(T0, 0, 1, 2, 3)  # hour 2 holds no run: the lines break there

    def line(*values: float | None) -> list[tuple[datetime, float | None]]:
        return list(zip(at, values, strict=True))

    runs, latency, cache, guard, lessons = panels(figure)
    assert runs["bars"] == list(zip(hours(T0, 0, 1, 3), [2, 1, 1], strict=True))
    # hour 0 holds 100 and 300 ms: percentile_cont gives 200, 290 and 298
    assert latency["lines"] == {
        "p50 (median)": line(200.0, 50.0, None, 900.0),
        "p95": line(290.0, 50.0, None, 900.0),
        "p99": line(298.0, 50.0, None, 900.0),
    }
    assert cache["lines"] == {"cache hits": line(50.0, 100.0, None, 0.0)}
    assert guard["lines"] == {"guard failures": line(50.0, 0.0, None, 100.0)}
    assert guard["ylim"] == (0.0, 100.0)
    assert lessons["lines"] == {
        "matched": line(5.0, 2.0, None, 5.0),
        "included": line(2.5, 1.0, None, 5.0),
    }
    assert [p["ylabel"] for p in (runs, latency, cache, guard, lessons)] == [
        "runs",
        "response time (ms)",
        "cache hits (%)",
        "guard failures (%)",
        "lessons per run (mean)",
    ]
    assert span(figure) == (T0 - timedelta(minutes=30), T0 + timedelta(hours=3, minutes=30))
