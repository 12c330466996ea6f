"""Every table the command line prints fits the terminal (80 columns, 40 too): long text is
cut with an ellipsis, but an identifier (a lesson id, a source, a worker, a key id, a
namespace) never: it wraps onto more lines, whole; ``--format plain|csv|json`` keeps every
value whole, the evidence and keys as JSON."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.metrics import RunTrace
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.cli import app
from contextstore.interfaces.cli.common import table
from tests.factories import make_metric
from tests.interfaces.cli.namespaces import every_namespace

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
    result = CliRunner().invoke(app, every_namespace(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


def lines(text: str) -> list[str]:
    """``text``'s lines without Rich's padding, each asserted to fit 80 columns."""
    found = [line.rstrip() for line in text.splitlines()]
    assert max(len(line) for line in found) <= 80, text
    return found


RULE = " " + "─" * 78
SUMMARY_CHANGE = 'summary: "" → Failover, safely'


def test_lessons_list_table_and_whole_values(database: str) -> None:
    assert lines(run("lessons", "list", "--database-url", database)) == [
        "2 lessons",
        "",
        " entity_id                                 status  severity  applies…  injecti…",
        RULE,
        " fleet.ops.database.failover.procedures.p  active  critical  tag:ops…  Before …",
        " rimary-cluster.eu-west-1.0001",
        " ops.tls                                   active  info      tag:ops   Rotate …",
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


def test_lesson_history_says_old_to_new_for_each_changed_column(database: str) -> None:
    shown = lines(run("lessons", "show", LONG_ID, "--database-url", database))
    history = shown[shown.index("history") :]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in history]
    rows = [row for row in rows if row]
    # insert, one scope event per key, the update; the long actor and key wrap, whole.
    assert [row[1] for row in rows if row[1]] == ["insert", "scope", "scope", "update"]
    assert "".join(row[2] for row in rows[-5:]) == LONG_ACTOR
    changed = [row[3] for row in rows]
    assert changed[1] == "applies_to: + tag:ops"
    assert " ".join(changed[2:5]) == f"applies_to: + {LONG_KEY[:30]} {LONG_KEY[30:]}"
    assert changed[5] == SUMMARY_CHANGE
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
        "lesson use over 2 runs in all namespaces",
        "",
        " lesson                          status  matched  included  last included (UTC)",
        RULE,
        " fleet.ops.database.failover.pr  active        1         1  2026-03-01 12:00",
        " ocedures.primary-cluster.eu-we",
        " st-1.0001",
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
        " agent-with-a-rather-long-worker-na     1    12.5    12.5     0.0           0.0",
        " me-from-the-eu-west-fleet-0001",
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
        "1 document",
        "",
        " source                                      chunks  metadata  updated (UTC)",
        RULE,
        ' runbooks/databases/postgresql/failover/pro       1  {"team"…  2026-03-01 12:00',
        " moting-a-standby-safely.md",
        "",
    ]
    assert lines(run("docs", "search", "standby", "--database-url", database)) == [
        "1 chunk for 'standby'",
        "",
        " #  score   source                                            passage  text",
        RULE,
        " 1  0.2877  runbooks/databases/postgresql/failover/promoting        0  Promote…",
        "            -a-standby-safely.md",
        "",
    ]
    (found,) = json.loads(run("docs", "search", "standby", "--database-url", database, "--json"))
    assert (found["source"], found["text"], found["metadata"]) == (LONG_SOURCE, LONG_TEXT, METADATA)
    plain = run("docs", "list", "--database-url", database, "--format", "plain").split("\t")
    assert (plain[0], json.loads(plain[1])) == (LONG_SOURCE, METADATA)


def test_match_tables(database: str) -> None:
    matched = lines(run("match", "--tag", "ops", "--database-url", database))
    assert matched[:8] == [
        "matched 2, showing 2",
        "┏━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┓",
        "┃ # ┃ lesson                                                        ┃ injecti… ┃",
        "┡━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━┩",
        "│ 1 │ fleet.ops.database.failover.procedures.primary-cluster.eu-wes │ Before … │",
        "│   │ t-1.0001                                                      │          │",
        "│ 2 │ ops.tls                                                       │ Rotate … │",
        "└───┴───────────────────────────────────────────────────────────────┴──────────┘",
    ]
    explained = lines(run("match", "--tag", "ops", "--explain", "--database-url", database))
    assert explained[:8] == [
        "matched 2, showing 2",
        "",
        " #  lesson                                                   matched…  outcome",
        RULE,
        " 1  fleet.ops.database.failover.procedures.primary-cluster.  tag:ops   included",
        "    eu-west-1.0001",
        " 2  ops.tls                                                  tag:ops   included",
        "",
    ]


def test_keys_list_table(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _, entry = add_key(
        path, "a-namespace-with-a-long-name-for-the-eu-west-fleet", "agent", label=LONG_TEXT
    )
    shown = lines(run("keys", "list", "--file", str(path)))
    # The title names the key file, whose temporary path may take one line or two.
    header = " id            namespace             role   created_at                 label"
    assert shown[shown.index(header) :] == [
        header,
        RULE,
        f" {entry.id}  a-namespace-with-a-l  agent  {entry.created_at}  Promote…",
        "               ong-name-for-the-eu-",
        "               west-fleet",
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


IDENTIFIED = [
    (["lessons", "list"], LONG_ID),
    (["lessons", "stats"], LONG_ID),
    (["metrics", "report", "--by", "worker"], LONG_WORKER),
    (["docs", "list"], LONG_SOURCE),
    (["docs", "search", "standby"], LONG_SOURCE),
    (["match", "--tag", "ops", "--explain"], LONG_ID),
]


@pytest.mark.parametrize(("args", "identifier"), IDENTIFIED, ids=lambda v: " ".join(v))
@pytest.mark.parametrize("width", [80, 40])
def test_at_any_width_identifiers_wrap_whole(
    database: str, args: list[str], identifier: str, width: int
) -> None:
    """The identifier's pieces, read down its column, are the identifier: nothing cut."""
    result = CliRunner().invoke(
        app, every_namespace((*args, "--database-url", database)), env={"COLUMNS": str(width)}
    )
    assert result.exit_code == 0, result.output
    out = [line.rstrip() for line in result.stdout.splitlines()]
    assert max(len(line) for line in out) <= width, result.stdout
    # Where its first piece begins: a word of some line that the identifier starts with.
    start, column = next(
        (index, found.start())
        for index, line in enumerate(out)
        for found in re.finditer(r"\S+", line)
        if len(found.group()) >= 3 and identifier.startswith(found.group())
    )
    pieces: list[str] = []
    for line in out[start:]:
        piece = line[column:].split(" ")[0].strip()
        if not piece or not identifier.startswith("".join([*pieces, piece])):
            break
        pieces.append(piece)
    assert "".join(pieces) == identifier, result.stdout
