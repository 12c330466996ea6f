"""One admin typo in SQL never stops the fleet: the row is skipped, reported, and the rest work.

SQLite refuses such rows since revision 0003_audit, so its bad rows are written the way a
real database comes to hold them: under 0002, then upgraded. PostgreSQL's own types accept
values Python cannot hold (``infinity``, an instant before year 1).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore import Scope, connect
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.repository import LessonRepository
from contextstore.backends.sql.unreadable import SkipWarnings
from contextstore.core.matching import MatchOptions, match
from contextstore.errors import ValidationError

GOOD = ("fleet.good.1", "fleet.good.2")
# entity_id → (column, value typed by hand, words of the reason)
BAD = {
    "sqlite": {
        "fleet.bad.when": ("created_at", "yesterday", "ISO 8601"),
        "fleet.bad.evidence": ("evidence", "{not json", "not JSON"),
        "fleet.bad.year": ("updated_at", "0001-01-01 00:00:00+05:00", "ISO 8601"),
    },
    "postgresql": {
        "fleet.bad.when": ("created_at", "infinity", "years 1–9998"),
        "fleet.bad.year": ("created_at", "0001-01-01 00:00:00+05", "years 1–9998"),
        "fleet.bad.updated": ("updated_at", "-infinity", "years 1–9998"),
    },
}


# How PostgreSQL prints back what was typed (SQLite keeps the text as typed).
STORED = {"0001-01-01 00:00:00+05": "0001-12-31 19:00:00+00 BC"}


@pytest.fixture
def typo_url(empty_database_url: str) -> Iterator[str]:
    """A database at head holding two good active lessons and the dialect's bad rows, all
    keyed ``tag:ops``."""
    url = empty_database_url
    dialect = "postgresql" if url.startswith("postgresql") else "sqlite"
    migrate(url, "0002" if dialect == "sqlite" else "head")
    engine = create_database_engine(url)
    with engine.begin() as connection:
        rows = [(entity_id, None, None) for entity_id in GOOD]
        rows += [
            (entity_id, column, value) for entity_id, (column, value, _) in BAD[dialect].items()
        ]
        for entity_id, column, value in rows:
            extra = f", {column}" if column else ""
            connection.execute(
                sa.text(
                    f"INSERT INTO lessons (entity_id, status, injection_form{extra}) "
                    f"VALUES (:id, 'active', :form{', :value' if column else ''})"
                ),
                {"id": entity_id, "form": f"Do {entity_id}.", "value": value},
            )
            connection.execute(
                sa.text(
                    "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                    "VALUES (:id, 'tag:ops', 0)"
                ),
                {"id": entity_id},
            )
    engine.dispose()
    migrate(url)
    yield url


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> SkipWarnings:
    warnings = SkipWarnings()
    monkeypatch.setattr("contextstore.backends.sql.lessons.queries.SKIP_WARNINGS", warnings)
    return warnings


def bad_rows(url: str) -> dict[str, tuple[str, str, str]]:
    return BAD["postgresql" if url.startswith("postgresql") else "sqlite"]


def test_every_other_lesson_of_the_scope_still_matches(
    typo_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_database_engine(typo_url)
    repo = LessonRepository(engine)
    caplog.set_level(logging.WARNING, logger="contextstore.core.lessons")
    scope = Scope(tags=("ops",))
    for _ in range(3):
        found = repo.candidates(scope)
        # Matching reads entity_id, severity, created_at and the form: a row whose only fault
        # is elsewhere (evidence, updated_at) still matches.
        readable = sorted(
            [
                *GOOD,
                *(e for e, (column, _, _) in bad_rows(typo_url).items() if column != "created_at"),
            ]
        )
        assert [lesson.entity_id for lesson in found] == readable
        result = match(found, scope, MatchOptions())
        assert sorted(m.entity_id for m in result.included) == readable
    # list and export skip every unreadable row
    assert [r.entity_id for r in repo.list()] == list(GOOD)
    assert [json.loads(line)["entity_id"] for line in repo.export_jsonl()] == list(GOOD)
    # one WARNING per unreadable lesson, however many reads met it
    warned = sorted(
        r.getMessage().split("'")[1] for r in caplog.records if "skipped" in r.getMessage()
    )
    assert warned == sorted(bad_rows(typo_url))
    engine.dispose()


def test_warnings_repeat_once_per_interval() -> None:
    from contextstore.backends.sql.unreadable import UnreadableRowError

    now = [0.0]
    warnings = SkipWarnings(interval=60.0, clock=lambda: now[0])
    error = UnreadableRowError("created_at", "x", "bad")
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("contextstore.core.lessons")
    logger.addHandler(handler)
    try:
        for moment in (0.0, 1.0, 59.9, 60.0, 61.0, 130.0):
            now[0] = moment
            warnings.skipped("a.b", error)
            warnings.skipped("c.d", error)
    finally:
        logger.removeHandler(handler)
    assert len(logged) == 6  # two lessons × (0.0, 60.0, 130.0)


def test_a_run_still_returns_the_good_lessons(typo_url: str) -> None:
    with connect(database_url=typo_url) as store:
        result = store.engine().run("how do I drain a node?", scope=Scope(tags=("ops",)))
    included = {lesson.entity_id for lesson in result.lessons.included}
    assert set(GOOD) <= included and "fleet.bad.when" not in included


def test_the_bad_lesson_itself_is_one_clear_error_naming_the_column(typo_url: str) -> None:
    engine = create_database_engine(typo_url)
    repo = LessonRepository(engine)
    for entity_id, (column, _, _) in bad_rows(typo_url).items():
        with pytest.raises(ValidationError) as raised:
            repo.get(entity_id)
        assert raised.value.field == column
        assert "db check" in raised.value.message
    assert repo.get(GOOD[0]).entity_id == GOOD[0]
    engine.dispose()


def test_check_lists_each_unreadable_row_with_its_reason(typo_url: str) -> None:
    engine = create_database_engine(typo_url)
    found = LessonRepository(engine).check()
    expected = bad_rows(typo_url)
    assert [row.entity_id for row in found] == sorted(expected)
    for row in found:
        column, value, words = expected[row.entity_id]
        assert (row.column, words in row.reason) == (column, True)
        assert row.value == STORED.get(value, value)
    engine.dispose()


def test_db_check_command_exits_1_and_lists_the_rows(typo_url: str) -> None:
    from contextstore.interfaces.cli.db import app
    from contextstore.interfaces.cli.lessons import app as lessons_app

    runner = CliRunner()
    result = runner.invoke(app, ["check", "--database-url", typo_url, "--json"])
    assert result.exit_code == 1, result.output
    listed = json.loads(result.stdout)
    assert [row["entity_id"] for row in listed] == sorted(bad_rows(typo_url))
    table = runner.invoke(app, ["check", "--database-url", typo_url])
    assert table.exit_code == 1 and "fleet.bad.when" in table.stdout
    # lessons list and show of a good lesson keep working
    shown = runner.invoke(lessons_app, ["list", "--json", "--database-url", typo_url])
    assert shown.exit_code == 0 and len(json.loads(shown.stdout)) == len(GOOD)
    shown = runner.invoke(lessons_app, ["show", GOOD[0], "--database-url", typo_url])
    assert shown.exit_code == 0, shown.output


def test_db_check_on_a_clean_database_exits_0(database_url: str) -> None:
    from contextstore.interfaces.cli.db import app

    result = CliRunner().invoke(app, ["check", "--database-url", database_url])
    assert result.exit_code == 0 and "every lesson row reads" in result.stdout
