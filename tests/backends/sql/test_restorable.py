"""Every backup restores: rows typed by hand that an import would refuse.

Such rows are written the way a real database comes to hold them: under revision 0010
(before the database refused them), then upgraded. At head the database refuses each of
them; ``db check`` names the old ones, readers skip them, and an export of the rest imports
into an empty database with the same lessons.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.repository import LessonRepository
from contextstore.backends.sql.unreadable import UnreadableLesson
from contextstore.config import ContextEngineConfig
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.web.settings import ServiceSettings
from tests.backends.sql.conftest import SQLITE_ONLY

BEFORE = "0010_metrics_autovacuum"
GOOD = ("keep.one", "keep.two")
DEEP = "[" * 1000 + "]" * 1000
CYCLE = "is in a supersede cycle: bad.cycle.a -> bad.cycle.b -> bad.cycle.a"
NAMED = [
    UnreadableLesson(
        "bad.chain",
        "superseded_by",
        "bad.cycle.a",
        "is superseded by 'bad.cycle.a', which a backup leaves out",
    ),
    UnreadableLesson("bad.cycle.a", "superseded_by", "bad.cycle.b", CYCLE),
    UnreadableLesson("bad.cycle.b", "superseded_by", "bad.cycle.a", CYCLE),
    UnreadableLesson(
        "bad.deep",
        "evidence",
        "[" * 200 + "… (2,000 characters)",
        "nests deeper than 64 arrays or objects",
    ),
    UnreadableLesson(
        "bad.huge", "evidence", '{"n": 1e400}', "holds 1e400, a number JSON cannot carry"
    ),
    UnreadableLesson(
        "bad.orphan",
        "superseded_by",
        "gone.lesson",
        "is superseded by 'gone.lesson', which is not a lesson",
    ),
]


def dialect_of(url: str) -> str:
    return "postgresql" if url.startswith("postgresql") else "sqlite"


def _insert(connection: sa.Connection, entity_id: str, evidence: str = "{}") -> None:
    connection.execute(
        sa.text(
            "INSERT INTO lessons (entity_id, status, injection_form, evidence) "
            "VALUES (:id, 'active', :form, :evidence)"
        ),
        {"id": entity_id, "form": f"Do {entity_id}.", "evidence": evidence},
    )
    connection.execute(
        sa.text(
            "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES (:id, 'tag:ops', 0)"
        ),
        {"id": entity_id},
    )


def _supersede(connection: sa.Connection, old: str, new: str) -> None:
    connection.execute(
        sa.text(
            "UPDATE lessons SET status = 'superseded', superseded_by = :new WHERE entity_id = :old"
        ),
        {"old": old, "new": new},
    )


def _delete_with_foreign_keys_off(url: str, entity_id: str) -> None:
    """As the sqlite3 shell does (foreign keys off by default), or on PostgreSQL as the owner
    who switches every trigger and foreign key off for the session."""
    if dialect_of(url) == "sqlite":
        raw = sqlite3.connect(sa.make_url(url).database or "")
        try:
            raw.execute("DELETE FROM lessons WHERE entity_id = ?", (entity_id,))
            raw.commit()
        finally:
            raw.close()
        return
    engine = create_database_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("SET LOCAL session_replication_role = replica"))
        connection.execute(sa.text("DELETE FROM lessons WHERE entity_id = :id"), {"id": entity_id})
    engine.dispose()


@pytest.fixture
def typed_url(empty_database_url: str) -> Iterator[str]:
    """A database at head holding two good lessons and each kind of row typed by hand
    (before revision 0012) that an import would refuse."""
    url = empty_database_url
    migrate(url, BEFORE)
    engine = create_database_engine(url)
    with engine.begin() as connection:
        _insert(connection, "keep.one", '{"ok": [1, 2.5, "x"]}')
        _insert(connection, "keep.two")
        _insert(connection, "bad.deep", DEEP)
        _insert(connection, "bad.huge", '{"n": 1e400}')
        for entity_id in ("bad.cycle.a", "bad.cycle.b", "bad.chain", "bad.orphan", "gone.lesson"):
            _insert(connection, entity_id)
        _supersede(connection, "bad.cycle.a", "bad.cycle.b")
        _supersede(connection, "bad.cycle.b", "bad.cycle.a")
        _supersede(connection, "bad.chain", "bad.cycle.a")
        _supersede(connection, "bad.orphan", "gone.lesson")
    engine.dispose()
    _delete_with_foreign_keys_off(url, "gone.lesson")
    migrate(url)
    yield url


def test_db_check_names_every_row_an_export_leaves_out(typed_url: str) -> None:
    from contextstore.interfaces.cli.db import app

    engine = create_database_engine(typed_url)
    assert LessonRepository(engine).check() == NAMED
    engine.dispose()
    result = CliRunner().invoke(app, ["check", "--database-url", typed_url, "--json"])
    assert result.exit_code == 1
    assert [row["entity_id"] for row in json.loads(result.stdout)] == [r.entity_id for r in NAMED]


def test_the_export_imports_into_an_empty_database_with_the_same_lessons(
    typed_url: str, tmp_path: Path
) -> None:
    from contextstore.interfaces.cli.lessons import app

    runner = CliRunner()
    exported = runner.invoke(app, ["export", "--database-url", typed_url])
    assert exported.exit_code == 0, exported.output
    lines = exported.stdout.splitlines()
    assert [json.loads(line)["entity_id"] for line in lines] == list(GOOD)
    backup = tmp_path / "backup.jsonl"
    backup.write_text(exported.stdout, encoding="utf-8")
    empty = f"sqlite:///{tmp_path / 'restored.db'}"
    imported = runner.invoke(app, ["import", str(backup), "--database-url", empty])
    assert imported.exit_code == 0, imported.output
    again = runner.invoke(app, ["export", "--database-url", empty])
    assert again.stdout.splitlines() == lines


def test_cli_readers_name_the_row_and_go_on(typed_url: str) -> None:
    from contextstore.interfaces.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["lessons", "list", "--json", "--database-url", typed_url])
    assert listed.exit_code == 0, listed.output
    ids = [row["entity_id"] for row in json.loads(listed.stdout)]
    # list skips what it cannot read; lessons in a cycle or dangling still read
    assert ids == ["bad.chain", "bad.cycle.a", "bad.cycle.b", "bad.orphan", *GOOD]
    shown = runner.invoke(app, ["lessons", "show", "bad.deep", "--database-url", typed_url])
    assert shown.exit_code == 2
    assert shown.stderr.count("\n") == 1
    assert shown.stderr.startswith("error: evidence: lesson 'bad.deep'")
    assert "nests deeper than 64" in shown.stderr
    matched = runner.invoke(app, ["match", "--tag", "ops", "--json", "--database-url", typed_url])
    assert matched.exit_code == 0, matched.output
    assert "Traceback" not in matched.output


def test_the_service_and_the_console_list_the_lessons_that_read(
    typed_url: str, tmp_path: Path
) -> None:
    from contextstore.interfaces.apikeys import KeyRing
    from contextstore.interfaces.console import build_console, with_console
    from contextstore.interfaces.service.app import build_api, guarded
    from contextstore.interfaces.web.telemetry import Telemetry

    keys = tmp_path / "keys.json"
    key, _ = add_key(keys, "ops", "admin")
    settings = ServiceSettings(keys_file=keys, store=ContextEngineConfig(database_url=typed_url))
    api = build_api(settings, Telemetry())
    ring = KeyRing(keys, required=True)
    console = build_console(lambda: api.state.backends, ring, settings)
    app = with_console(console, guarded(api, ring, settings), settings)

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with (
            api.router.lifespan_context(api),
            httpx.AsyncClient(transport=transport, base_url="http://service.test") as client,
        ):
            listed = await client.get("/v1/lessons", headers={"Authorization": f"Bearer {key}"})
            one = await client.get(
                "/v1/lessons/bad.deep", headers={"Authorization": f"Bearer {key}"}
            )
            form = await client.get("/console/signin")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            await client.post("/console/signin", data={"csrf": token.group(1), "key": key})
            return listed, one, await client.get("/console/lessons")

    listed, one, page = asyncio.run(scenario())
    assert listed.status_code == 200, listed.text
    ids = [row["entity_id"] for row in listed.json()]
    assert ids == ["bad.chain", "bad.cycle.a", "bad.cycle.b", "bad.orphan", *GOOD]
    assert one.status_code == 422
    assert one.json()["error"]["field"] == "evidence"
    assert page.status_code == 200
    assert "keep.one" in page.text and "bad.deep" not in page.text


# What the database refuses at head: (statement, words of the error).
@pytest.mark.parametrize(
    "statement, refusal",
    [
        (
            "UPDATE lessons SET status = 'superseded', superseded_by = 'keep.one' "
            "WHERE entity_id = 'keep.two'; "
            "UPDATE lessons SET status = 'superseded', superseded_by = 'keep.two' "
            "WHERE entity_id = 'keep.one'",
            "supersede cycle",
        ),
        (
            "INSERT INTO lessons (entity_id, status, injection_form, evidence) "
            f"VALUES ('new.deep', 'active', 'x', '{'[' * 65 + ']' * 65}')",
            "nests deeper than 64",
        ),
        (
            "INSERT INTO lessons (entity_id, status, injection_form, evidence) "
            "VALUES ('new.huge', 'active', 'x', '{\"n\": 1e400}')",
            "beyond a 64-bit float",
        ),
        (
            "UPDATE lessons SET evidence = '{\"n\": [-2e308]}' WHERE entity_id = 'keep.one'",
            "beyond a 64-bit float",
        ),
    ],
    ids=["cycle", "deep", "huge", "huge-update"],
)
def test_the_database_refuses_what_an_import_would_refuse(
    database_url: str, statement: str, refusal: str
) -> None:
    engine = create_database_engine(database_url)
    with engine.begin() as connection:
        _insert(connection, "keep.one")
        _insert(connection, "keep.two")
    with pytest.raises(sa.exc.IntegrityError, match=refusal), engine.begin() as connection:
        for part in statement.split("; "):
            connection.execute(sa.text(part))
    # 64 deep and the largest float are fine
    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE lessons SET evidence = :e WHERE entity_id = 'keep.two'"),
            {"e": "[" * 64 + "1.7976931348623157e308" + "]" * 64},
        )
    assert LessonRepository(engine).check() == []
    engine.dispose()


@SQLITE_ONLY
def test_with_foreign_keys_off_sqlite_still_refuses_a_dangling_reference(
    database_url: str,
) -> None:
    engine = create_database_engine(database_url)
    with engine.begin() as connection:
        _insert(connection, "keep.one")
        _insert(connection, "keep.two")
        _supersede(connection, "keep.two", "keep.one")
    engine.dispose()
    raw = sqlite3.connect(sa.make_url(database_url).database or "")
    try:
        assert raw.execute("PRAGMA foreign_keys").fetchone() == (0,)
        refusals = {
            "DELETE FROM lessons WHERE entity_id = 'keep.one'": "superseded_by of another",
            "INSERT INTO lessons (entity_id, status, injection_form, superseded_by) "
            "VALUES ('new.one', 'superseded', 'x', 'no.such')": "names no lesson",
            "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
            "VALUES ('no.such', 'tag:x', 0)": "lesson_scopes.lesson_id names no lesson",
        }
        for statement, refusal in refusals.items():
            with pytest.raises(sqlite3.IntegrityError, match=refusal):
                raw.execute(statement)
        # a lesson deleted with foreign keys off takes its scope keys along
        raw.execute("DELETE FROM lessons WHERE entity_id = 'keep.two'")
        raw.commit()
        assert raw.execute("SELECT lesson_id FROM lesson_scopes").fetchall() == [("keep.one",)]
    finally:
        raw.close()


def test_the_history_shows_an_old_deep_audit_row_as_its_text(typed_url: str) -> None:
    engine = create_database_engine(typed_url)
    events = LessonRepository(engine).history("bad.deep")
    engine.dispose()
    assert [event.event for event in events] == ["insert", "scope"]
    shown = events[0].changes
    assert isinstance(shown, str)  # the stored row (with its evidence), as text
    assert shown.startswith("{") and shown.endswith(" characters)")
    assert events[1].changes == {"added": "tag:ops"}


def test_evidence_64_deep_is_stored_exported_and_audited(database_url: str) -> None:
    from contextstore.core.lessons import LessonRecord

    engine = create_database_engine(database_url)
    repo = LessonRepository(engine)
    deep = json.loads("[" * 64 + "]" * 64)
    repo.add(LessonRecord("deep.ok", "Keep it.", evidence={"a": 1}))
    repo.update("deep.ok", evidence=deep)
    assert repo.get("deep.ok").evidence == deep
    assert repo.history("deep.ok")[-1].changes == {"evidence": {"old": {"a": 1}, "new": deep}}
    assert [json.loads(line)["evidence"] for line in repo.export_jsonl()] == [deep]
    engine.dispose()
