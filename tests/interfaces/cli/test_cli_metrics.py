"""``contextstore metrics report|prune`` through the real command tree, on a SQLite file."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.metrics import QueryMetric
from contextstore.interfaces.cli import app
from tests.factories import make_metric
from tests.plotted import capture_figures, panels

runner = CliRunner()


def metric(now: datetime, age: timedelta, **fields: Any) -> QueryMetric:
    defaults = {"context_length": 1000, "lessons_matched": 4, "lessons_included": 2}
    return make_metric(now - age, **{"response_ms": 100.0, **defaults, **fields})


def rows(now: datetime) -> list[QueryMetric]:
    """Five runs aged from ``now``, which is when the test records them: the windows the
    commands read ("1h", "7d") are measured from the moment they run."""
    return [
        metric(now, timedelta(days=40), response_ms=900.0, complexity="high", guard_passed=False),
        metric(now, timedelta(days=2), response_ms=50.0, complexity="medium", cache_hit=True),
        metric(now, timedelta(hours=3), response_ms=70.0, worker="beta-1"),
        metric(now, timedelta(minutes=30), response_ms=80.0, namespace="other"),
        metric(now, timedelta(minutes=10), response_ms=90.0, complexity="high", guard_passed=False),
    ]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, MetricsRepository]]:
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    migrate(url)
    engine = create_database_engine(url)
    repository = MetricsRepository(engine)
    repository.record_many(rows(datetime.now(UTC)))
    yield url, repository
    engine.dispose()


def invoke(*args: str) -> Result:
    """``metrics ARGS``: over every namespace unless ARGS name one (a command covers its
    namespace, ``default``, without either)."""
    every = [] if "--namespace" in args else ["--all-namespaces"]
    return runner.invoke(app, ["metrics", *args, *every])


def report_json(url: str, *args: str) -> dict[str, Any]:
    result = invoke("report", "--json", "--database-url", url, *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_report_prints_overall_and_by_complexity_tables(
    database: tuple[str, MetricsRepository],
) -> None:
    url, _ = database
    result = invoke("report", "--database-url", url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Query metrics · all namespaces, all workers" in out
    assert "Overall" in out and "By complexity" in out
    for label in (
        "runs",
        "response time p50 (ms)",
        "response time p95 (ms)",
        "response time p99 (ms)",
        "guard failures (%)",
        "cache hits (%)",
        "lessons matched (total)",
        "lessons included (mean per run)",
    ):
        assert label in out
    assert out.index("low") < out.index("medium") < out.index("high")
    # Five runs; p50 of 50, 70, 80, 90, 900 is 80; 2 of 5 failed the guard.
    overall = out.split("By complexity")[0]
    assert _row(overall, "runs") == ["5"]
    assert _row(overall, "response time p50 (ms)") == ["80.0"]
    assert _row(overall, "guard failures (%)") == ["40.0"]
    assert _row(out.split("By complexity")[1], "runs") == ["2", "1", "2"]
    # Fits an 80-column terminal without cutting numbers short.
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "…" not in out


def _row(text: str, label: str) -> list[str]:
    """The cells after ``label`` in the Rich table row that starts with it."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if cells and cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_report_json_equals_the_library_report(database: tuple[str, MetricsRepository]) -> None:
    url, repository = database
    data = report_json(url)
    assert data == repository.report().as_dict()
    assert data["runs"] == 5
    assert [row["complexity"] for row in data["by_complexity"]] == ["low", "medium", "high"]


def test_report_filters(database: tuple[str, MetricsRepository]) -> None:
    url, _ = database
    assert report_json(url, "--namespace", "ns")["runs"] == 4
    assert report_json(url, "--worker-prefix", "beta")["runs"] == 1
    assert report_json(url, "--since", "1h")["runs"] == 2
    assert report_json(url, "--since", "7d", "--until", "1h")["runs"] == 2
    assert (
        report_json(url, "--since", "1w", "--namespace", "ns", "--worker-prefix", "alpha")["runs"]
        == 2
    )
    since = (datetime.now(UTC) - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%S")  # no offset: UTC
    data = report_json(url, "--since", since)
    assert data["runs"] == 3
    assert data["since"] == f"{since}+00:00"
    empty = report_json(url, "--namespace", "nobody")
    assert empty["runs"] == 0 and empty["p50_ms"] is None


def test_choices_are_matched_in_any_case(database: tuple[str, MetricsRepository]) -> None:
    url, _ = database
    high = report_json(url, "--complexity", "HIGH")
    assert (high["runs"], high["complexity"]) == (2, "high")
    assert report_json(url, "--intent", "Factual")["runs"] == 5
    grouped = report_json(url, "--by", "Complexity")
    assert [group["key"] for group in grouped["groups"]] == ["low", "medium", "high"]


def test_report_with_a_plot_writes_the_png(
    database: tuple[str, MetricsRepository], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = database
    saved = capture_figures(monkeypatch)
    target = tmp_path / "fleet.png"
    result = invoke("report", "--database-url", url, "--since", "3d", "--plot", str(target))
    assert result.exit_code == 0, result.output
    assert f"plot written to {target}" in result.stdout
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 20_000
    # the four runs of the last three days, whatever buckets they fall in
    (figure,) = saved
    runs, latency, *_ = panels(figure)
    assert sum(height for _, height in runs["bars"]) == 4
    medians = sorted(v for _, v in latency["lines"]["p50 (median)"] if v is not None)
    assert set(medians) <= {50.0, 70.0, 80.0, 90.0, 75.0, 85.0, 60.0}
    assert figure.get_suptitle().startswith("contextstore metrics — 4 runs, ")


def test_plot_with_json_keeps_stdout_pure_json(
    database: tuple[str, MetricsRepository], tmp_path: Path
) -> None:
    url, _ = database
    target = tmp_path / "fleet.png"
    result = invoke(
        "report", "--json", "--database-url", url, "--plot", str(target), "--bucket", "1h"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == 5
    assert "plot written" in result.stderr
    assert target.exists()


def test_prune_deletes_old_rows_and_says_how_many(
    database: tuple[str, MetricsRepository],
) -> None:
    url, repository = database
    dry = invoke("prune", "--older-than", "1d", "--dry-run", "--database-url", url)
    assert dry.exit_code == 0, dry.output
    assert "would delete 2 metrics rows" in dry.stdout
    assert repository.count() == 5

    result = invoke("prune", "--older-than", "30d", "--database-url", url)
    assert result.exit_code == 0, result.output
    assert "deleted 1 metrics row recorded before" in result.stdout
    assert "(all namespaces)" in result.stdout
    assert repository.count() == 4

    data = json.loads(
        invoke(
            "prune", "--older-than", "1d", "--namespace", "ns", "--json", "--database-url", url
        ).stdout
    )
    assert data["deleted"] == 1 and data["namespace"] == "ns" and data["dry_run"] is False
    assert datetime.fromisoformat(data["cutoff"]) < datetime.now(UTC)
    assert repository.count() == 3


def test_prune_accepts_a_timestamp(database: tuple[str, MetricsRepository]) -> None:
    url, repository = database
    cutoff = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    result = invoke("prune", "--older-than", cutoff, "--json", "--database-url", url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 2
    assert repository.count() == 3


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["report", "--since", "banana"], ["--since", "'banana'"]),
        (["report", "--until", "7x"], ["--until", "'7x'"]),
        (["report", "--since", "1h", "--until", "2h"], ["--since", "after --until"]),
        (["report", "--since", "2026-13-45"], ["--since"]),
        (["report", "--plot", "out.jpg"], ["--plot", ".png"]),
        (["report", "--plot", "{tmp}/missing/x.png"], ["--plot", "does not exist"]),
        (["report", "--plot", "{tmp}"], ["--plot"]),
        (["report", "--bucket", "0m", "--plot", "{tmp}/x.png"], ["--bucket"]),
        (["report", "--bucket", "hourly", "--plot", "{tmp}/x.png"], ["--bucket", "'hourly'"]),
        (["prune"], ["--older-than is required"]),
        (
            ["report", "--intent", "procedurall"],
            ["intent: 'procedurall' is not one of factual, reasoning, comparative, procedural"],
        ),
        (
            ["report", "--complexity", "HIGHEST"],
            ["complexity: 'HIGHEST' is not one of low, medium"],
        ),
        (["report", "--by", "team"], ["--by: 'team' is not one of complexity, intent, worker"]),
        (["prune", "--older-than", "soon"], ["--older-than", "'soon'"]),
        (["prune", "--older-than", "-3d"], ["--older-than"]),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    database: tuple[str, MetricsRepository],
    tmp_path: Path,
    args: list[str],
    fragments: list[str],
) -> None:
    url, repository = database
    filled = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = invoke(*filled, "--database-url", url)
    assert_one_line_error(result, *fragments)
    assert result.exit_code == 2
    assert repository.count() == 5  # nothing was pruned
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://somewhere/db", "only sqlite:// and postgresql://"),
        ("sqlite:////nonexistent-dir/x/metrics.db", "does not exist"),
        ("postgresql+psycopg://nobody:secret@127.0.0.1:1/none", "unavailable"),
    ],
)
def test_an_unusable_database_is_one_line_and_exit_1(url: str, fragment: str) -> None:
    for command in (["report"], ["prune", "--older-than", "30d"]):
        result = invoke(*command, "--database-url", url)
        assert_one_line_error(result, fragment)
        assert result.exit_code == 1
        assert "secret" not in result.stderr


def test_plot_without_matplotlib_is_one_line(
    database: tuple[str, MetricsRepository], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = database
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = invoke("report", "--database-url", url, "--plot", str(tmp_path / "x.png"))
    assert_one_line_error(result, "needs matplotlib", "pip install 'contextstore[plot]'")
    assert result.exit_code == 1


def test_report_on_a_new_database_creates_the_schema_and_shows_zeros(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    data = report_json(url)
    assert data["runs"] == 0 and data["p95_ms"] is None
    engine = sa.create_engine(url)
    try:
        assert "query_metrics" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_user_text_is_printed_literally_not_as_markup(
    database: tuple[str, MetricsRepository],
) -> None:
    url, _ = database
    result = invoke("report", "--database-url", url, "--namespace", "[red]x[/red]")
    assert result.exit_code == 0, result.output
    assert "namespace '[red]x[/red]'" in result.stdout
    pruned = invoke("prune", "--older-than", "1d", "--namespace", "[b]y", "--database-url", url)
    assert "(namespace '[b]y')" in pruned.stdout
