"""The command line over traces: namespaces from the environment, report filters and groups,
``lessons stats``, ``lessons edit``, paging, ``--format`` and ``match --explain``.

Tables are checked at 80 columns; every other format against the library's own answer.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.metrics import QueryMetric, RunTrace
from contextstore.interfaces.cli import app
from tests.factories import make_metric
from tests.interfaces.cli.namespaces import every_namespace

NOW = datetime.now(UTC)
LONG_FORM = "Before failing over Postgres, confirm replica lag is under five seconds " * 3


def metric(namespace: str, minutes: int, **fields: Any) -> QueryMetric:
    return make_metric(NOW - timedelta(minutes=minutes), namespace=namespace, **fields)


ROWS = [
    metric(
        "x",
        50,
        complexity="high",
        intent="procedural",
        cache_hit=False,
        lessons_matched=2,
        lessons_included=2,
        trace=RunTrace(
            ("fleet.ops",),
            ("ops",),
            ("ops.db.failover", "ops.tls"),
            ("ops.db.failover", "ops.tls"),
            ("pg.md",),
        ),
    ),
    metric(
        "x",
        40,
        complexity="low",
        cache_hit=True,
        lessons_matched=2,
        lessons_included=1,
        trace=RunTrace((), ("ops",), ("ops.db.failover", "ops.tls"), ("ops.db.failover",), ()),
    ),
    metric("x", 30, worker="beta-1", lessons_matched=0, lessons_included=0),
    metric(
        "y",
        20,
        lessons_matched=1,
        lessons_included=1,
        trace=RunTrace((), ("web",), ("ops.tls",), ("ops.tls",), ("tls.md",)),
    ),
]


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    migrate(url)
    engine = create_database_engine(url)
    MetricsRepository(engine).record_many(ROWS)
    lessons = LessonRepository(engine)
    for entity_id, status in [
        ("ops.db.failover", "active"),
        ("ops.tls", "active"),
        ("ops.unused.with.a.rather.long.identifier.0001", "active"),
        ("ops.old", "proposed"),
    ]:
        lessons.add(
            LessonRecord(
                entity_id,
                LONG_FORM[:300] if entity_id == "ops.db.failover" else f"Form of {entity_id}.",
                status=status,
                severity="warning",
                applies_to=("tag:ops", "id:fleet.ops.db.primary.cluster"),
                summary="Postgres failover" if "failover" in entity_id else "",
                evidence={"runs": [1, 2]},
                created_at=NOW - timedelta(days=1),
            )
        )
    yield url
    engine.dispose()


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    command = every_namespace(args, env)
    return CliRunner().invoke(app, command, env={"COLUMNS": "80", **(env or {})})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def usage_error(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for word in words:
        assert word in lines[0]


def fits_80(text: str) -> None:
    assert text.strip(), "nothing printed"
    assert max(len(line) for line in text.splitlines()) <= 80, text


def report(url: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = ok(run("metrics", "report", "--database-url", url, "--json", *args, env=env))
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# -- namespaces -----------------------------------------------------------------------------


def test_metrics_report_honours_the_namespace_variable(database: str) -> None:
    data = report(database, env={"CONTEXTSTORE_NAMESPACE": "x"})
    assert (data["namespace"], data["runs"]) == ("x", 3)
    assert report(database, "--namespace", "y", env={"CONTEXTSTORE_NAMESPACE": "x"})["runs"] == 1
    everything = report(database, "--all-namespaces", env={"CONTEXTSTORE_NAMESPACE": "x"})
    assert (everything["namespace"], everything["runs"]) == (None, 4)
    assert report(database)["runs"] == 4  # unset: every namespace, as before
    usage_error(
        run(
            "metrics", "report", "--database-url", database, "--namespace", "x", "--all-namespaces"
        ),
        "--all-namespaces",
    )


def test_an_empty_report_says_so_in_one_line(database: str) -> None:
    result = ok(
        run(
            "metrics",
            "report",
            "--database-url",
            database,
            env={"CONTEXTSTORE_NAMESPACE": "nobody"},
        )
    )
    assert result.stdout == "no runs recorded: namespace 'nobody', all workers\n"
    result = ok(run("lessons", "stats", "--database-url", database, "--namespace", "nobody"))
    assert result.stdout == (
        "no runs recorded in namespace 'nobody'; 3 active lessons, none included\n"
    )


def test_prune_honours_the_namespace_variable(database: str) -> None:
    result = ok(
        run(
            "metrics",
            "prune",
            "--older-than",
            "1m",
            "--dry-run",
            "--json",
            "--database-url",
            database,
            env={"CONTEXTSTORE_NAMESPACE": "y"},
        )
    )
    assert json.loads(result.stdout)["would_delete"] == 1


# -- report filters and groups ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "runs"),
    [
        (("--complexity", "high"), 1),
        (("--intent", "procedural"), 1),
        (("--cache-hit",), 1),
        (("--no-cache-hit",), 3),
        (("--worker-prefix", "beta"), 1),
        (("--lesson", "ops.tls"), 2),
        (("--lesson", "ops.db.failover", "--cache-hit"), 1),
    ],
)
def test_report_filters(database: str, args: tuple[str, ...], runs: int) -> None:
    assert report(database, *args)["runs"] == runs


def test_report_by_lesson_as_json_csv_and_a_table_that_fits(database: str) -> None:
    data = report(database, "--by", "lesson")
    # Two runs each: a tie, broken by the key.
    assert [(g["key"], g["runs"]) for g in data["groups"]] == [
        ("ops.db.failover", 2),
        ("ops.tls", 2),
    ]
    rows = list(
        csv.DictReader(
            io.StringIO(
                ok(
                    run(
                        "metrics",
                        "report",
                        "--database-url",
                        database,
                        "--by",
                        "lesson",
                        "--format",
                        "csv",
                    )
                ).stdout
            )
        )
    )
    assert [(row["key"], row["runs"]) for row in rows] == [
        ("ops.db.failover", "2"),
        ("ops.tls", "2"),
    ]
    table = ok(run("metrics", "report", "--database-url", database, "--by", "worker")).stdout
    fits_80(table)
    assert "By worker" in table and "beta-1" in table


def test_report_refuses_a_bad_grouping_and_plain_without_groups(database: str) -> None:
    usage_error(run("metrics", "report", "--database-url", database, "--by", "query"), "--by")
    usage_error(run("metrics", "report", "--database-url", database, "--format", "csv"), "--by")


# -- lessons stats --------------------------------------------------------------------------


def test_lessons_stats_json_equals_the_library(database: str) -> None:
    data = json.loads(ok(run("lessons", "stats", "--database-url", database, "--json")).stdout)
    assert data["runs"] == 4
    assert [(u["entity_id"], u["runs_matched"], u["runs_included"]) for u in data["lessons"]] == [
        ("ops.tls", 3, 2),
        ("ops.db.failover", 2, 2),
    ]
    assert data["unused"] == ["ops.unused.with.a.rather.long.identifier.0001"]
    only_x = json.loads(
        ok(
            run(
                "lessons",
                "stats",
                "--database-url",
                database,
                "--json",
                env={"CONTEXTSTORE_NAMESPACE": "x"},
            )
        ).stdout
    )
    assert [(u["entity_id"], u["runs_included"]) for u in only_x["lessons"]] == [
        ("ops.db.failover", 2),
        ("ops.tls", 1),
    ]


def test_lessons_stats_table_fits_80_columns_and_csv_keeps_ids_whole(database: str) -> None:
    table = ok(run("lessons", "stats", "--database-url", database)).stdout
    fits_80(table)
    assert "lesson use over 4 runs in all namespaces" in table
    rows = list(
        csv.DictReader(
            io.StringIO(
                ok(run("lessons", "stats", "--database-url", database, "--format", "csv")).stdout
            )
        )
    )
    assert rows[-1]["entity_id"] == "ops.unused.with.a.rather.long.identifier.0001"
    assert rows[-1]["runs_included"] == "0"


# -- lessons list, edit ------------------------------------------------------------------------


def test_lessons_list_pages_and_formats(database: str) -> None:
    def ids(*args: str) -> list[str]:
        out = ok(
            run("lessons", "list", "--database-url", database, "--format", "plain", *args)
        ).stdout
        return [line.split("\t")[0] for line in out.splitlines()]

    everything = ids()
    assert everything == sorted(everything) and len(everything) == 4
    assert ids("--limit", "2") == everything[:2]
    assert ids("--limit", "2", "--offset", "2") == everything[2:]
    assert ids("--offset", "3") == everything[3:]
    empty = ok(run("lessons", "list", "--database-url", database, "--offset", "9"))
    assert empty.stdout == "no lessons after the first 9\n"


def test_lessons_table_cuts_long_text_but_other_formats_keep_it_whole(database: str) -> None:
    table = ok(run("lessons", "list", "--database-url", database)).stdout
    fits_80(table)
    assert "…" in table and "ops.db.failover" in table
    plain = ok(run("lessons", "list", "--database-url", database, "--format", "plain")).stdout
    assert LONG_FORM[:300] in plain
    rows = list(
        csv.DictReader(
            io.StringIO(
                ok(run("lessons", "list", "--database-url", database, "--format", "csv")).stdout
            )
        )
    )
    assert rows[0]["injection_form"] == LONG_FORM[:300]
    assert json.loads(rows[0]["evidence"]) == {"runs": [1, 2]}
    assert json.loads(rows[0]["applies_to"]) == ["tag:ops", "id:fleet.ops.db.primary.cluster"]
    listed = json.loads(
        ok(run("lessons", "list", "--database-url", database, "--format", "json")).stdout
    )
    assert listed[0]["injection_form"] == LONG_FORM[:300]
    usage_error(
        run("lessons", "list", "--database-url", database, "--json", "--format", "csv"), "--json"
    )


def test_lessons_show_prints_evidence_as_json(database: str) -> None:
    shown = ok(run("lessons", "show", "ops.tls", "--database-url", database)).stdout
    assert '{"runs": [1, 2]}' in shown


def test_lessons_edit_changes_the_given_fields_only(database: str) -> None:
    before = json.loads(
        ok(run("lessons", "show", "ops.tls", "--json", "--database-url", database)).stdout
    )
    edited = json.loads(
        ok(
            run(
                "lessons",
                "edit",
                "ops.tls",
                "--form",
                "Rotate TLS certs monthly.",
                "--severity",
                "critical",
                "--key",
                "tag:web",
                "--key",
                "id:fleet",
                "--summary",
                "TLS",
                "--actor",
                "alice",
                "--json",
                "--database-url",
                database,
            )
        ).stdout
    )
    assert (
        edited["injection_form"],
        edited["severity"],
        edited["applies_to"],
        edited["summary"],
    ) == (
        "Rotate TLS certs monthly.",
        "critical",
        ["tag:web", "id:fleet"],
        "TLS",
    )
    assert edited["detail"] == before["detail"] and edited["created_at"] == before["created_at"]
    assert edited["updated_at"] != before["updated_at"]
    history = json.loads(
        ok(run("lessons", "show", "ops.tls", "--json", "--database-url", database)).stdout
    )["history"]
    updates = [e for e in history if e["event"] == "update"]
    assert [e["actor"] for e in updates] == ["alice"]
    assert updates[0]["changes"]["injection_form"]["new"] == "Rotate TLS certs monthly."
    assert updates[0]["changes"]["severity"] == {"old": "warning", "new": "critical"}
    scope_events = [e["changes"] for e in history if e["event"] == "scope"]
    assert {"added": "tag:web"} in scope_events and {"removed": "tag:ops"} in scope_events
    cleared = json.loads(
        ok(
            run("lessons", "edit", "ops.tls", "--no-keys", "--json", "--database-url", database)
        ).stdout
    )
    assert cleared["applies_to"] == []


def test_lessons_edit_refusals(database: str) -> None:
    usage_error(run("lessons", "edit", "ops.tls", "--database-url", database), "nothing to change")
    usage_error(
        run(
            "lessons", "edit", "ops.tls", "--key", "tag:x", "--no-keys", "--database-url", database
        ),
        "--no-keys",
    )
    result = run("lessons", "edit", "ops.tls", "--severity", "urgent", "--database-url", database)
    assert result.exit_code == 2 and "severity" in result.stderr
    result = run("lessons", "edit", "nope", "--summary", "x", "--database-url", database)
    assert result.exit_code == 1 and "nope" in result.stderr


# -- match --explain, --order ----------------------------------------------------------------


def test_match_explain_json_agrees_with_the_included_list(database: str) -> None:
    result = ok(
        run(
            "match",
            "--tag",
            "ops",
            "--explain",
            "--json",
            "--k",
            "1",
            "--order",
            "relevance",
            "--query",
            "How do I fail over Postgres?",
            "--database-url",
            database,
        )
    )
    data = json.loads(result.stdout)
    assert (
        [e["entity_id"] for e in data["explanation"] if e["included"]]
        == [item["entity_id"] for item in data["lessons"]["included"]]
        == ["ops.db.failover"]
    )
    assert [(e["rank"], e["excluded_by"], e["reason"]) for e in data["explanation"]] == [
        (1, None, None),
        (2, "k", None),
        (3, "k", None),
        (None, None, "not active"),  # ops.old, proposed
    ]
    assert data["explanation"][0]["relevance"] > 0


def test_match_explain_table_fits_80_columns(database: str) -> None:
    table = ok(
        run("match", "--tag", "ops", "--explain", "--k", "2", "--database-url", database)
    ).stdout
    fits_80(table)
    assert "out: k reached" in table and "included" in table


def test_match_refuses_an_unknown_order(database: str) -> None:
    usage_error(
        run("match", "--tag", "ops", "--order", "newest", "--database-url", database), "--order"
    )
