"""``contextstore lessons``: tables for people, ``--json`` for scripts, one line per refusal.

Runs on SQLite and PostgreSQL through the SQL test fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine
from contextstore.interfaces.cli.lessons import app
from tests.backends.sql.conftest import counts, database_url, empty_database_url

__all__ = ["database_url", "empty_database_url"]  # fixtures, re-used from tests/backends/sql


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = create_database_engine(database_url)
    yield engine
    engine.dispose()


Invoke = Callable[..., Result]


@pytest.fixture
def cli(database_url: str) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, [*args, "--database-url", database_url], input=input)

    return invoke


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result


def refused(result: Result, *words: str, code: int = 2) -> None:
    """Exit status ``code`` (2: a value refused; 1: no such lesson, a file that cannot be
    read), exactly one line on stderr mentioning ``words``, no traceback."""
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error:"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def add(cli: Invoke, entity_id: str = "fleet.ops.1", *extra: str) -> Result:
    return cli("add", entity_id, "--form", f"Form {entity_id}.", "--key", "tag:ops", *extra)


def test_add_list_show_happy_paths_print_tables(cli: Invoke) -> None:
    result = ok(add(cli, "fleet.ops.1", "--severity", "critical", "--status", "active"))
    assert "fleet.ops.1" in result.stdout and "critical" in result.stdout
    ok(add(cli, "fleet.ops.2"))
    listing = ok(cli("list")).stdout
    assert "2 lessons" in listing and "fleet.ops.2" in listing and "tag:ops" in listing
    shown = ok(cli("show", "fleet.ops.1")).stdout
    assert "history" in shown and "insert" in shown


def test_json_output(cli: Invoke) -> None:
    added = json.loads(ok(add(cli, "fleet.ops.1", "--json")).stdout)
    assert added["entity_id"] == "fleet.ops.1" and added["applies_to"] == ["tag:ops"]
    ok(add(cli, "fleet.db.1", "--severity", "warning"))
    listed = json.loads(ok(cli("list", "--severity", "warning", "--json")).stdout)
    assert [item["entity_id"] for item in listed] == ["fleet.db.1"]
    activated = json.loads(ok(cli("activate", "fleet.ops.1", "--json")).stdout)
    assert activated["status"] == "active"
    shown = json.loads(ok(cli("show", "fleet.ops.1", "--json")).stdout)
    assert [event["event"] for event in shown["history"]] == ["insert", "scope", "status"]


def test_status_commands(cli: Invoke) -> None:
    ok(add(cli, "fleet.ops.1", "--status", "active"))
    ok(add(cli, "fleet.ops.2"))
    ok(cli("supersede", "fleet.ops.1", "fleet.ops.2"))
    listed = json.loads(ok(cli("list", "--json")).stdout)
    assert [(i["status"], i["superseded_by"]) for i in listed] == [
        ("superseded", "fleet.ops.2"),
        ("active", None),
    ]
    assert "retired" in ok(cli("retire", "fleet.ops.2")).stdout
    ok(cli("delete", "fleet.ops.1", "--yes"))
    assert json.loads(ok(cli("list", "--json")).stdout)[0]["entity_id"] == "fleet.ops.2"


def test_export_then_import_round_trips_and_reimport_changes_nothing(
    cli: Invoke, engine: sa.Engine, tmp_path: Path
) -> None:
    ok(add(cli, "fleet.ops.1", "--created-at", "2025-01-02T03:04:05.000006+02:00"))
    ok(add(cli, "fleet.ops.2", "--status", "active"))
    exported = tmp_path / "lessons.jsonl"
    ok(cli("export", "--output", str(exported)))
    assert ok(cli("export")).stdout == exported.read_text(encoding="utf-8")
    first = json.loads(exported.read_text(encoding="utf-8").splitlines()[0])
    assert first["created_at"] == "2025-01-02T01:04:05.000006+00:00"

    before = counts(engine)
    summary = json.loads(ok(cli("import", str(exported), "--json")).stdout)
    assert summary == {"added": 0, "updated": 0, "unchanged": 2}
    assert counts(engine) == before

    with engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM lessons"))
    table = ok(cli("import", str(exported))).stdout
    assert "added" in table
    assert ok(cli("export")).stdout == exported.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("add", "fleet.x", "--form", "f", "--severity", "urgent"), ("severity", "urgent")),
        (("add", "fleet.x", "--form", "f", "--key", "foo:bar"), ("applies_to", "foo:bar")),
        (("add", "fleet..x", "--form", "f"), ("entity_id",)),
        (("add", "fleet.x", "--form", "€" * 107), ("injection_form", "321")),
        (("add", "fleet.x", "--form", "f", "--created-at", "yesterday"), ("created_at",)),
        (("add", "fleet.ops.1", "--form", "f"), ("entity_id", "already exists")),
        (("activate", "no.such"), ("no.such", 1)),
        (("retire", "no.such"), ("no.such", 1)),
        (("show", "no.such"), ("no.such", 1)),
        (("delete", "no.such", "--yes"), ("no.such", 1)),
        (("supersede", "fleet.ops.1", "no.such"), ("superseded_by", "no.such", 1)),
        (("list", "--status", "bogus"), ("status",)),
    ],
)
def test_bad_input_prints_one_line_and_writes_nothing(
    cli: Invoke, engine: sa.Engine, args: tuple[str, ...], words: tuple[str | int, ...]
) -> None:
    ok(add(cli))
    before = counts(engine)
    texts = [word for word in words if isinstance(word, str)]
    codes = [word for word in words if isinstance(word, int)]
    refused(cli(*args), *texts, code=codes[0] if codes else 2)
    assert counts(engine) == before


def test_unreadable_or_malformed_import_files(
    cli: Invoke, engine: sa.Engine, tmp_path: Path
) -> None:
    refused(cli("import", str(tmp_path / "missing.jsonl")), "missing.jsonl", code=1)
    refused(cli("import", str(tmp_path)), code=1)  # a directory
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    refused(cli("import", str(binary)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"entity_id": "a.b", "injection_form": "x"}\n{"entity_id": "a.c", "severity": "urgent"}\n',
        encoding="utf-8",
    )
    refused(cli("import", str(bad)), "line 2", "severity")
    bad.write_text('{"entity_id": "a.b", "injection_form": "x"}\n{oops\n', encoding="utf-8")
    refused(cli("import", str(bad)), "line 2")
    assert counts(engine) == (0, 0, 0)


def test_actor_is_recorded_and_defaults_to_the_os_user(cli: Invoke) -> None:
    import getpass

    ok(add(cli, "fleet.ops.1", "--actor", "alice"))
    ok(cli("activate", "fleet.ops.1", "--actor", "bob"))
    ok(cli("retire", "fleet.ops.1"))
    shown = json.loads(ok(cli("show", "fleet.ops.1", "--json")).stdout)
    assert [(e["event"], e["actor"]) for e in shown["history"]] == [
        ("insert", "alice"),
        ("scope", "alice"),
        ("status", "bob"),
        ("status", getpass.getuser()),
    ]
    assert shown["history"][2]["changes"] == {"status": {"old": "proposed", "new": "active"}}
    table = ok(cli("show", "fleet.ops.1")).stdout
    assert "alice" in table and "bob" in table and "applies_to: + tag:ops" in table
    assert "status: proposed → active" in table
    refused(cli("activate", "fleet.ops.1", "--actor", " "), "actor")


def test_a_lifecycle_violation_is_one_error_line(cli: Invoke, engine: sa.Engine) -> None:
    ok(add(cli, "fleet.ops.1", "--status", "active"))
    ok(add(cli, "fleet.ops.2", "--status", "active"))
    ok(cli("supersede", "fleet.ops.1", "fleet.ops.2"))
    before = counts(engine)
    refused(cli("activate", "fleet.ops.1"), "status", "superseded")
    assert counts(engine) == before
