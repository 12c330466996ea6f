"""Every table the command line prints fits 80 columns: long text is cut with an ellipsis and
no cell wraps onto a second line; ``--format plain|csv|json`` keeps every value whole, the
evidence and keys as JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from contextstore.apikeys import add_key
from contextstore.cli import app
from contextstore.cli.common import table
from contextstore.lessons import LessonRecord
from contextstore.metrics import RunTrace
from contextstore.sql.database import create_database_engine, migrate
from contextstore.sql.knowledge import KnowledgeBase
from contextstore.sql.metrics import MetricsRepository
from contextstore.sql.repository import LessonRepository
from tests.factories import make_metric

LONG_ID = "fleet.ops.database.failover.procedures.primary-cluster.eu-west-1.0001"
LONG_KEY = "id:fleet.ops.database.failover.procedures.primary-cluster"
# A form with a line break and a tab: a table shows both as spaces, on one line.
LONG_FORM = "Before failing over,\nconfirm\treplica lag is under five seconds on every standby."
LONG_SOURCE = "runbooks/databases/postgresql/failover/promoting-a-standby-safely.md"
LONG_TEXT = "Promote the standby only after replication lag is under five seconds."
LONG_WORKER = "agent-with-a-rather-long-worker-name-from-the-eu-west-fleet-0001"
LONG_ACTOR = "an-administrator-with-a-long-name@operations.example.org"
EVIDENCE = {"runs": [101, 102], "note": "seen in the March incident"}
METADATA = {"team": "databases", "owner": "the platform group of EU West"}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'tables.db'}"
    migrate(url)
    engine = create_database_engine(url)
    lessons = LessonRepository(engine)
    lessons.add(
        LessonRecord(
            LONG_ID,
            LONG_FORM,
            status="active",
            severity="critical",
            applies_to=("tag:ops", LONG_KEY),
            evidence=EVIDENCE,
            created_at=T0,
        )
    )
    lessons.add(
        LessonRecord(
            "ops.tls",
            "Rotate certificates.",
            status="active",
            applies_to=("tag:ops",),
            created_at=T0,
        )
    )
    lessons.as_actor(LONG_ACTOR).update(LONG_ID, summary="Failover, safely")
    MetricsRepository(engine).record_many(
        [
            make_metric(
                T0,
                worker=LONG_WORKER,
                trace=RunTrace(lessons_matched=(LONG_ID,), lessons_included=(LONG_ID,)),
            ),
            make_metric(T0, worker="w-2"),
        ]
    )
    KnowledgeBase(engine, clock=lambda: T0).add(LONG_TEXT, LONG_SOURCE, METADATA)
    engine.dispose()
    yield url


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


def lines(text: str) -> list[str]:
    """``text``'s lines without Rich's padding, each asserted to fit 80 columns."""
    found = [line.rstrip() for line in text.splitlines()]
    assert max(len(line) for line in found) <= 80, text
    return found


RULE = " " + "─" * 78


def test_lessons_list_table_and_whole_values(database: str) -> None:
    assert lines(run("lessons", "list", "--database-url", database)) == [
        "2 lesson(s)",
        "",
        " entity_id                         status  severity  applies_to    injection_f…",
        RULE,
        " fleet.ops.database.failover.pro…  active  critical  tag:ops, id…  Before fail…",
        " ops.tls                           active  info      tag:ops       Rotate cert…",
        "",
    ]
    records = json.loads(run("lessons", "list", "--database-url", database, "--json"))
    assert (records[0]["injection_form"], records[0]["evidence"]) == (LONG_FORM, EVIDENCE)
    parsed = list(
        csv.DictReader(
            io.StringIO(run("lessons", "list", "--database-url", database, "--format", "csv"))
        )
    )
    assert parsed[0]["injection_form"] == LONG_FORM
    assert json.loads(parsed[0]["evidence"]) == EVIDENCE
    assert json.loads(parsed[0]["applies_to"]) == ["tag:ops", LONG_KEY]
    plain = run("lessons", "list", "--database-url", database, "--format", "plain")
    first = plain.splitlines()[0].split("\t")
    assert first[0] == LONG_ID
    assert first[7] == LONG_FORM.replace("\n", "\\n").replace("\t", "\\t")
    assert json.loads(first[10]) == EVIDENCE


def test_lesson_history_rows_stay_on_one_line(database: str) -> None:
    shown = lines(run("lessons", "show", LONG_ID, "--database-url", database))
    history = shown[shown.index("history") :]
    rows = [line for line in history if line.startswith("│")]
    # insert, one scope event per key, the update: one line each, the long actor cut.
    assert [row.split("│")[2].strip() for row in rows] == ["insert", "scope", "scope", "update"]
    assert rows[3].split("│")[3].strip() == "an-administrat…"
    assert '│ evidence       │ {"runs": [101, 102], "note": "seen in the March incident"}  │' in (
        shown
    )
    assert (
        json.loads(run("lessons", "show", LONG_ID, "--database-url", database, "--json"))[
            "history"
        ][3]["actor"]
        == LONG_ACTOR
    )


def test_lessons_stats_table(database: str) -> None:
    assert lines(run("lessons", "stats", "--database-url", database)) == [
        "lesson use over 2 run(s) in all namespaces",
        "",
        " lesson                          status  matched  included  last included (UTC)",
        RULE,
        " fleet.ops.database.failover.p…  active        1         1  2026-03-01 12:00",
        " ops.tls                         active        0         0  —",
        "",
    ]


def test_metrics_report_groups_table(database: str) -> None:
    out = lines(run("metrics", "report", "--by", "worker", "--database-url", database))
    assert out[out.index("By worker") :] == [
        "By worker",
        "",
        " worker                              runs  p50 ms  p95 ms  hits %  guard fail %",
        RULE,
        " agent-with-a-rather-long-worker-n…     1    12.5    12.5     0.0           0.0",
        " w-2                                    1    12.5    12.5     0.0           0.0",
        "",
    ]
    grouped = csv.DictReader(
        io.StringIO(
            run(
                "metrics", "report", "--by", "lesson", "--format", "csv", "--database-url", database
            )
        )
    )
    assert [row["key"] for row in grouped] == [LONG_ID]


def test_docs_list_and_search_tables(database: str) -> None:
    assert lines(run("docs", "list", "--database-url", database)) == [
        "1 documents",
        "",
        " source                                  chunks  metadata      updated (UTC)",
        RULE,
        ' runbooks/databases/postgresql/failove…       1  {"team": "d…  2026-03-01 12:00',
        "",
    ]
    assert lines(run("docs", "search", "standby", "--database-url", database)) == [
        "1 chunks for 'standby'",
        "",
        " #  score   source                        passage  text",
        RULE,
        " 1  0.2877  runbooks/databases/postgres…        0  Promote the standby only af…",
        "",
    ]
    (found,) = json.loads(run("docs", "search", "standby", "--database-url", database, "--json"))
    assert (found["source"], found["text"], found["metadata"]) == (LONG_SOURCE, LONG_TEXT, METADATA)
    plain = run("docs", "list", "--database-url", database, "--format", "plain").split("\t")
    assert (plain[0], json.loads(plain[1])) == (LONG_SOURCE, METADATA)


def test_match_tables(database: str) -> None:
    matched = lines(run("match", "--tag", "ops", "--database-url", database))
    assert matched[:7] == [
        "matched 2, showing 2",
        "┏━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ # ┃ lesson                             ┃ injection form                      ┃",
        "┡━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ 1 │ fleet.ops.database.failover.proce… │ Before failing over, confirm repli… │",
        "│ 2 │ ops.tls                            │ Rotate certificates.                │",
        "└───┴────────────────────────────────────┴─────────────────────────────────────┘",
    ]
    explained = lines(run("match", "--tag", "ops", "--explain", "--database-url", database))
    assert explained[:7] == [
        "matched 2, showing 2",
        "",
        " #  lesson                                               matched keys  outcome",
        RULE,
        " 1  fleet.ops.database.failover.procedures.primary-clu…  tag:ops       included",
        " 2  ops.tls                                              tag:ops       included",
        "",
    ]


def test_keys_list_table(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _, entry = add_key(
        path, "a-namespace-with-a-long-name-for-the-eu-west-fleet", "agent", label=LONG_TEXT
    )
    shown = lines(run("keys", "list", "--file", str(path)))
    assert shown[2:] == [
        " id            namespace         role   created_at                 label",
        RULE,
        f" {entry.id}  a-namespace-wit…  agent  {entry.created_at}  Promote the…",
        "",
    ]
    listed = json.loads(run("keys", "list", "--file", str(path), "--json"))
    assert listed[0]["label"] == LONG_TEXT


def test_text_columns_give_way_before_any_cell_wraps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long text in columns not named flexible is cut too; numbers are never cut."""
    monkeypatch.setenv("COLUMNS", "80")
    out = Console(width=80, record=True, file=io.StringIO())
    rows: list[list[object]] = [[LONG_SOURCE, LONG_WORKER, 12345, LONG_TEXT], ["a", "b", 1, "c\nd"]]
    out.print(table("t", ["source", "worker", "n", "text"], rows, flexible="text", compact=True))
    assert lines(out.export_text()) == [
        "t",
        "",
        " source                         worker                              n  text",
        RULE,
        " runbooks/databases/postgresq…  agent-with-a-rather-long-wor…  12,345  Promote…",
        " a                              b                                   1  c d",
        "",
    ]
