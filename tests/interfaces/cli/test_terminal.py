"""Stored text reaches a terminal as text: every command shows control characters visibly.

An API caller may store any character, escape sequences included: ``ESC ] 52`` (write the
clipboard), ``ESC [ 2 J`` (clear the screen), BEL, and the C1 controls (U+009B is a CSI on
its own). Tables, plain and CSV output show them as ``\\xNN``; ``--json`` keeps every value
exact, its escapes JSON's own. Never a raw ESC, BEL or C1 byte. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from contextstore import connect
from contextstore.core.lessons import LessonRecord
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.cli import app
from contextstore.interfaces.cli.visible import visible
from tests.backends.sql.conftest import database_url, empty_database_url
from tests.factories import make_metric
from tests.interfaces.cli.namespaces import every_namespace

__all__ = ["database_url", "empty_database_url"]  # fixtures, re-used from tests/backends/sql

HOSTILE = "Page the DBA\x1b]52;c;cm0gLXJmIH4=\x07 then\x1b[2J fail over\x9b31m\x85 now\x7f"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # any control but tab and line breaks
LESSON = "nw.ops.db.0042"


def shown(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout + (result.stderr or "")


def no_raw_controls(text: str) -> None:
    found = RAW.search(text)
    assert found is None, (
        f"raw {found.group()!r} at {found.start()}: {text[found.start() - 40 :]!r}"
    )


@pytest.fixture
def hostile(database_url: str, tmp_path: Path) -> tuple[str, Path]:
    """A database holding the hostile text in a lesson, a document and a metrics row, and a
    key file with it in a label."""
    with connect(database_url=database_url, redis_url="", namespace="ops") as store:
        store.lessons.add(
            LessonRecord(
                LESSON,
                HOSTILE[:200],
                status="active",
                applies_to=("tag:ops",),
                summary=HOSTILE,
                detail=HOSTILE,
                evidence={"note": HOSTILE},
            )
        )
        store.knowledge.add(f"How to fail over postgres. {HOSTILE}", f"ops/{HOSTILE[:20]}.md")
        store.metrics.record(
            make_metric(datetime.now(UTC), namespace="ops", worker=f"w{HOSTILE[12:30]}")
        )
    keys = tmp_path / "keys.json"
    add_key(keys, "ops", "agent", label=HOSTILE)
    return database_url, keys


def run(*args: str) -> Result:
    return CliRunner().invoke(app, every_namespace(args), env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    "args",
    [
        ["lessons", "show", LESSON],
        ["lessons", "list"],
        ["lessons", "list", "--format", "plain"],
        ["lessons", "list", "--format", "csv"],
        ["lessons", "export"],
        ["match", "--tag", "ops"],
        ["match", "--tag", "ops", "--explain", "--query", "fail over"],
        ["run", "how do I fail over postgres?", "--tag", "ops", "--namespace", "ops"],
        ["docs", "list", "--namespace", "ops"],
        ["docs", "search", "fail over postgres", "--namespace", "ops"],
        ["metrics", "report", "--by", "worker"],
    ],
    ids=lambda args: " ".join(args[:3]),
)
def test_no_command_sends_a_terminal_raw_control_characters(
    hostile: tuple[str, Path], args: list[str]
) -> None:
    url, _ = hostile
    output = shown(run(*args, "--database-url", url))
    no_raw_controls(output)
    assert "\\x1b" in output or "\\u001b" in output  # shown, not dropped


def test_documents_and_key_labels_are_shown_visibly(hostile: tuple[str, Path]) -> None:
    url, keys = hostile
    with connect(database_url=url, redis_url="", namespace="ops") as store:
        source = store.knowledge.list()[0].source
    for args in (
        ["docs", "show", source, "--namespace", "ops", "--database-url", url],
        ["keys", "list", "--file", str(keys)],
        ["keys", "list", "--file", str(keys), "--format", "plain"],
    ):
        output = shown(run(*args))
        no_raw_controls(output)
        assert "\\x1b" in output


@pytest.mark.parametrize(
    "args",
    [
        ["lessons", "show", LESSON, "--json"],
        ["lessons", "list", "--json"],
        ["match", "--tag", "ops", "--json"],
    ],
)
def test_json_keeps_the_stored_text_exactly(hostile: tuple[str, Path], args: list[str]) -> None:
    url, _ = hostile
    output = shown(run(*args, "--database-url", url))
    no_raw_controls(output)
    data = json.loads(output)
    if isinstance(data, list):
        lesson = data[0]
    elif "lessons" in data:  # a match: the one result shape
        lesson = data["lessons"]["included"][0]
    else:
        lesson = data
    assert lesson["injection_form"] == HOSTILE[:200]


def test_the_export_round_trips_the_hostile_text(hostile: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = hostile
    exported = shown(run("lessons", "export", "--database-url", url))
    no_raw_controls(exported)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    path = tmp_path / "lessons.jsonl"
    path.write_text(exported, encoding="utf-8")
    assert run("lessons", "import", str(path), "--database-url", target).exit_code == 0
    with connect(database_url=target, redis_url="") as store:
        assert store.lessons.get(LESSON).summary == HOSTILE


def test_visible_writes_each_control_as_its_code() -> None:
    assert visible("a\x1b[2Jb\x07c\x9bd\x7fe\tf\ng") == "a\\x1b[2Jb\\x07c\\x9bd\\x7fe\tf\ng"
    assert visible("tab\tline\n", keep="") == "tab\\x09line\\x0a"
    assert visible("é ✓ العربية") == "é ✓ العربية"
