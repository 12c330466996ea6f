"""Bytes that are not UTF-8, written into SQLite by hand, never stop a reader.

sqlite3 stores whatever bytes it is given (``CAST(x'80ff' AS TEXT)``): such a lesson is
skipped by every lesson reader with one WARNING per lesson per interval, the other lessons
still match, and ``contextstore db check`` lists it. The knowledge base skips such a document
in list and search; a metrics report shows the bytes escaped. PostgreSQL refuses the bytes
in the first place (the last test).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore import Scope, connect
from contextstore.backends.sql.aio import AsyncLessonRepository, create_async_database_engine
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.backends.sql.unreadable import SkipWarnings
from contextstore.core.lessons import LessonRecord
from contextstore.errors import ValidationError
from tests.backends.sql.conftest import POSTGRES_ONLY, SQLITE_ONLY
from tests.factories import make_metric

GOOD = ("fleet.good.1", "fleet.good.2")
# entity_id → (what is written by hand, the column db check names, the value it shows)
BAD = {
    "fleet.bad.summary": (
        "UPDATE lessons SET summary = CAST(x'80ff' AS TEXT) WHERE entity_id = :id",
        "summary",
        "\\x80\\xff",
    ),
    "fleet.bad.form": (
        "UPDATE lessons SET injection_form = CAST(x'446f80' AS TEXT) WHERE entity_id = :id",
        "injection_form",
        "Do\\x80",
    ),
    "fleet.bad.detail": (
        "UPDATE lessons SET detail = CAST(x'ff' AS TEXT) WHERE entity_id = :id",
        "detail",
        "\\xff",
    ),
    # Valid JSON (the CHECK passes) holding a string that is not UTF-8.
    "fleet.bad.evidence": (
        "UPDATE lessons SET evidence = CAST(x'7b2261223a2280227d' AS TEXT) WHERE entity_id = :id",
        "evidence",
        '{"a":"\\x80"}',
    ),
    # A second scope key, not the one the scope matches on.
    "fleet.bad.key": (
        "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
        "VALUES (:id, CAST(x'7461673a6f707380' AS TEXT), 1)",
        "applies_to",
        "tag:ops\\x80",
    ),
}
# Read by candidates() (matching): the rest are skipped only by the full readers.
MATCH_COLUMNS = ("summary", "injection_form", "entity_id")
BAD_ID = "fleet.bad.\\x80id"  # how db check shows the entity id typed as bytes


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> SkipWarnings:
    warnings = SkipWarnings()
    monkeypatch.setattr("contextstore.backends.sql.lessons.queries.SKIP_WARNINGS", warnings)
    monkeypatch.setattr("contextstore.backends.sql.metrics.repository.SKIP_WARNINGS", warnings)
    return warnings


def sqlite_path(url: str) -> str:
    database = sa.make_url(url).database
    assert database is not None
    return database


@pytest.fixture
def bad_url(database_url: str) -> str:
    """A SQLite database holding the GOOD lessons and the BAD ones, all keyed ``tag:ops``,
    the bytes written with sqlite3 itself, plus a lesson whose entity id is not UTF-8."""
    repo = LessonRepository(create_database_engine(database_url))
    for entity_id in (*GOOD, *BAD):
        repo.add(
            LessonRecord(entity_id, f"Do {entity_id}.", status="active", applies_to=("tag:ops",))
        )
    raw = sqlite3.connect(sqlite_path(database_url))
    with raw:
        for entity_id, (statement, _, _) in BAD.items():
            raw.execute(statement.replace(":id", "?"), (entity_id,))
        bad_id = "CAST(x'666c6565742e6261642e806964' AS TEXT)"  # fleet.bad.<0x80>id
        raw.execute(
            f"INSERT INTO lessons (entity_id, status, injection_form) "
            f"VALUES ({bad_id}, 'active', 'Do it.')"
        )
        raw.execute(
            f"INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
            f"VALUES ({bad_id}, 'tag:ops', 0)"
        )
    raw.close()
    return database_url


def matching(url: str) -> list[str]:
    """The lessons of tag:ops matching still reads: faults outside its columns do not count."""
    bad = [e for e, (_, column, _) in BAD.items() if column not in MATCH_COLUMNS]
    return sorted([*GOOD, *bad])


@SQLITE_ONLY
def test_every_reader_skips_the_row_and_the_others_still_match(
    bad_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="contextstore.core.lessons")
    engine = create_database_engine(bad_url)
    repo = LessonRepository(engine)
    scope = Scope(tags=("ops",))
    for _ in range(3):
        assert [lesson.entity_id for lesson in repo.candidates(scope)] == matching(bad_url)
        assert [r.entity_id for r in repo.list()] == list(GOOD)
        assert [json.loads(line)["entity_id"] for line in repo.export_jsonl()] == list(GOOD)
    with connect(database_url=bad_url) as store:
        result = store.engine().run("how do I drain a node?", scope=scope)
    assert sorted(m.entity_id for m in result.lessons.included) == matching(bad_url)
    # one WARNING per unreadable lesson, however many reads met it
    warned = sorted(
        r.getMessage().split("'")[1] for r in caplog.records if "skipped" in r.getMessage()
    )
    assert warned == sorted([*BAD, BAD_ID.replace("\\", "\\\\")])
    engine.dispose()


@SQLITE_ONLY
def test_the_async_reader_skips_it_too(bad_url: str) -> None:
    async def read() -> tuple[list[str], list[str]]:
        engine = create_async_database_engine(bad_url)
        try:
            repo = AsyncLessonRepository(engine)
            found = await repo.candidates(Scope(tags=("ops",)))
            listed = await repo.list()
        finally:
            await engine.dispose()
        return [lesson.entity_id for lesson in found], [r.entity_id for r in listed]

    assert asyncio.run(read()) == (matching(bad_url), list(GOOD))


@SQLITE_ONLY
def test_the_lesson_itself_is_one_clear_error_naming_the_column(bad_url: str) -> None:
    engine = create_database_engine(bad_url)
    repo = LessonRepository(engine)
    for entity_id, (_, column, shown) in BAD.items():
        with pytest.raises(ValidationError) as raised:
            repo.get(entity_id)
        assert raised.value.field == column
        assert f"{shown!r}: is not valid UTF-8" in raised.value.message
    # an import over it is refused before anything is written, naming the column
    with pytest.raises(ValidationError) as raised:
        repo.import_records([LessonRecord("fleet.bad.summary", "Fixed.", status="active")])
    assert raised.value.field == "summary"
    engine.dispose()


@SQLITE_ONLY
def test_db_check_lists_each_row_and_exits_1(bad_url: str) -> None:
    from contextstore.interfaces.cli.db import app

    engine = create_database_engine(bad_url)
    found = LessonRepository(engine).check()
    engine.dispose()
    expected = {e: (column, shown) for e, (_, column, shown) in BAD.items()}
    expected[BAD_ID] = ("entity_id", BAD_ID)
    # ordered by the stored bytes: 0x80 after every ASCII letter
    assert [row.entity_id for row in found] == [*sorted(BAD), BAD_ID]
    assert {row.entity_id: (row.column, row.value) for row in found} == expected
    assert {row.reason for row in found} == {"is not valid UTF-8"}

    runner = CliRunner()
    result = runner.invoke(app, ["check", "--database-url", bad_url, "--json"])
    assert result.exit_code == 1, result.output
    assert [row["entity_id"] for row in json.loads(result.stdout)] == [*sorted(BAD), BAD_ID]
    table = runner.invoke(app, ["check", "--database-url", bad_url])
    assert table.exit_code == 1 and "not valid UTF-8" in table.stdout


@SQLITE_ONLY
def test_lesson_commands_skip_it(bad_url: str) -> None:
    from contextstore.interfaces.cli.lessons import app

    runner = CliRunner()
    listed = runner.invoke(app, ["list", "--json", "--database-url", bad_url])
    assert listed.exit_code == 0, listed.output
    assert [row["entity_id"] for row in json.loads(listed.stdout)] == list(GOOD)
    exported = runner.invoke(app, ["export", "--database-url", bad_url])
    assert exported.exit_code == 0, exported.output
    assert [json.loads(x)["entity_id"] for x in exported.stdout.splitlines()] == list(GOOD)
    shown = runner.invoke(app, ["show", "fleet.bad.form", "--database-url", bad_url])
    assert shown.exit_code == 2  # a ValidationError naming the column, as HTTP's 422
    assert shown.output.startswith("error: injection_form: ") and "Traceback" not in shown.output
    stats = runner.invoke(app, ["stats", "--json", "--database-url", bad_url])
    assert stats.exit_code == 0, stats.output
    # every active lesson is unused (no runs); the one whose id is not UTF-8 is skipped
    assert json.loads(stats.stdout)["unused"] == sorted([*GOOD, *BAD])


@SQLITE_ONLY
def test_knowledge_list_and_search_skip_the_document(database_url: str) -> None:
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs")
    for source in ("a.md", "b.md", "c.md", "d.md"):
        base.add(f"Refund policy {source}.", source, {"team": "support"})
    raw = sqlite3.connect(sqlite_path(database_url))
    with raw:
        raw.execute("UPDATE documents SET source = CAST(x'622e6d6480' AS TEXT) WHERE source='b.md'")
        raw.execute(
            "UPDATE documents SET metadata = CAST(x'7b2274223a2280227d' AS TEXT) "
            "WHERE source = 'c.md'"
        )
        raw.execute(
            "UPDATE chunks SET text = CAST(x'526566756e6480' AS TEXT) WHERE document_id = "
            "(SELECT id FROM documents WHERE source = 'd.md')"
        )
    raw.close()
    assert [d.source for d in base.list()] == ["a.md", "d.md"]
    assert sorted(c.source for c in base.search("refund policy", top_k=10)) == ["a.md"]
    with pytest.raises(ValidationError) as raised:
        base.get("d.md")
    assert raised.value.field == "text" and repr("Refund\\x80") in raised.value.message
    assert base.get("a.md").passages == ("Refund policy a.md.",)
    engine.dispose()

    from contextstore.interfaces.cli.docs import app

    runner = CliRunner()
    common = ["--database-url", database_url, "--namespace", "docs"]
    listed = runner.invoke(app, ["list", "--json", *common])
    assert listed.exit_code == 0, listed.output
    assert [d["source"] for d in json.loads(listed.stdout)] == ["a.md", "d.md"]
    found = runner.invoke(app, ["search", "refund policy", "--json", *common])
    assert found.exit_code == 0, found.output
    assert [c["source"] for c in json.loads(found.stdout)] == ["a.md"]
    shown = runner.invoke(app, ["show", "d.md", *common])
    assert shown.exit_code == 2 and shown.output.startswith("error: text: ")


@SQLITE_ONLY
def test_a_metrics_report_shows_the_bytes_escaped(database_url: str) -> None:
    engine = create_database_engine(database_url)
    metrics = MetricsRepository(engine)
    when = datetime(2026, 1, 2, tzinfo=UTC)
    metrics.record_many([make_metric(when, worker="alpha-1") for _ in range(3)])
    raw = sqlite3.connect(sqlite_path(database_url))
    with raw:
        raw.execute(
            "UPDATE query_metrics SET worker = CAST(x'7780ff' AS TEXT) "
            "WHERE id = (SELECT min(id) FROM query_metrics)"
        )
    raw.close()
    report = metrics.report(by="worker")
    assert [(g.key, g.runs) for g in report.groups] == [("alpha-1", 2), ("w\\x80\\xff", 1)]
    engine.dispose()

    from contextstore.interfaces.cli.metrics import app

    result = CliRunner().invoke(
        app,
        ["report", "--by", "worker", "--json", "--all-namespaces", "--database-url", database_url],
    )
    assert result.exit_code == 0, result.output
    assert [g["key"] for g in json.loads(result.stdout)["groups"]] == ["alpha-1", "w\\x80\\xff"]


@POSTGRES_ONLY
def test_postgresql_refuses_bytes_that_are_not_utf8(database_url: str) -> None:
    engine = create_database_engine(database_url)
    LessonRepository(engine).add(LessonRecord("fleet.good.1", "Do it.", status="active"))
    with (
        pytest.raises(sa.exc.DataError, match="invalid byte sequence"),
        engine.begin() as connection,
    ):
        connection.execute(
            sa.text(
                "UPDATE lessons SET summary = convert_from('\\x80ff'::bytea, 'UTF8') "
                "WHERE entity_id = 'fleet.good.1'"
            )
        )
    assert LessonRepository(engine).get("fleet.good.1").summary == ""
    engine.dispose()


@SQLITE_ONLY
def test_the_audit_shows_the_bytes_escaped(bad_url: str) -> None:
    engine = create_database_engine(bad_url)
    repo = LessonRepository(engine)
    (update,) = [e for e in repo.history("fleet.bad.summary") if e.event == "update"]
    assert update.changes == {"summary": {"old": "", "new": "\\x80\\xff"}}
    assert update.actor == "sql"
    everything = repo.history()
    assert [e.lesson_id for e in everything if e.event == "insert"][-1] == BAD_ID
    engine.dispose()


@SQLITE_ONLY
def test_only_a_database_found_holding_such_bytes_decodes_leniently(
    bad_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from contextstore.backends.sql.database import SQLITE_TEXT_FACTORY, migrate

    clean_url = f"sqlite:///{tmp_path_factory.mktemp('clean') / 'clean.db'}"
    migrate(clean_url)
    for url, factory in ((clean_url, str), (bad_url, SQLITE_TEXT_FACTORY)):
        engine = create_database_engine(url)
        LessonRepository(engine).list()
        raw = engine.raw_connection()
        try:
            # the driver's own C decoder stays wherever no bad bytes were met
            assert raw.driver_connection.text_factory is factory  # type: ignore[attr-defined]
        finally:
            raw.close()
        engine.dispose()
