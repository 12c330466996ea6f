"""The audit and the lifecycle hold against anyone typing SQL, on SQLite and PostgreSQL.

Each test is an attack a careless administrator or a hostile user could try in plain SQL; it
asserts the exact outcome: refused, or recorded in ``lesson_events`` with its actor.
"""

from __future__ import annotations

import getpass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.errors import ValidationError
from tests.backends.sql.conftest import POSTGRES_ONLY, SQLITE_ONLY, counts


def run(engine: sa.Engine, *statements: str, **params: Any) -> None:
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(sa.text(statement), params)


def refused(engine: sa.Engine, *statements: str, **params: Any) -> str:
    """Run ``statements`` in one transaction, expect the database to refuse; the message."""
    before = counts(engine)
    with pytest.raises(sa.exc.IntegrityError) as raised:
        run(engine, *statements, **params)
    assert counts(engine) == before
    return str(raised.value.orig)


def audit(engine: sa.Engine) -> list[tuple[Any, ...]]:
    with Session(engine) as session:
        return [
            (e.event, e.old_status, e.new_status, e.actor, e.changes)
            for e in LessonRepository(engine, session=session).history()
        ]


def sql_actor(engine: sa.Engine) -> str:
    """Who plain SQL is recorded as: the database user on PostgreSQL, else ``sql``."""
    return "postgres" if engine.dialect.name == "postgresql" else "sql"


@pytest.fixture
def lesson(engine: sa.Engine) -> sa.Engine:
    """One active lesson ``a.b`` keyed ``tag:x``, typed in plain SQL."""
    run(
        engine,
        "INSERT INTO lessons (entity_id, status, injection_form) VALUES ('a.b', 'active', 'Do X.')",
        "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES ('a.b', 'tag:x', 0)",
    )
    return engine


# -- the lifecycle ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "target", "allowed"),
    [
        ("proposed", "active", True),
        ("proposed", "retired", True),
        ("proposed", "superseded", False),
        ("active", "retired", True),
        ("active", "superseded", True),
        ("active", "proposed", False),
        ("retired", "active", True),
        ("retired", "proposed", False),
        ("retired", "superseded", False),
        ("superseded", "active", False),
        ("superseded", "retired", False),
        ("superseded", "proposed", False),
    ],
)
def test_the_database_enforces_the_lifecycle(
    engine: sa.Engine, start: str, target: str, allowed: bool
) -> None:
    run(
        engine,
        "INSERT INTO lessons (entity_id, status, injection_form) VALUES ('n', 'active', 'x')",
    )
    superseded_by = "'n'" if start == "superseded" else "NULL"
    run(
        engine,
        "INSERT INTO lessons (entity_id, status, injection_form, superseded_by) "
        f"VALUES ('o', :start, 'x', {superseded_by})",
        start=start,
    )
    pointer = "'n'" if target == "superseded" else "NULL"
    change = f"UPDATE lessons SET status = :target, superseded_by = {pointer} WHERE entity_id = 'o'"
    if allowed:
        run(engine, change, target=target)
        assert LessonRepository(engine).get("o").status == target
    else:
        assert "lesson lifecycle" in refused(engine, change, target=target)
        assert LessonRepository(engine).get("o").status == start


def test_the_repository_refuses_what_the_lifecycle_forbids_naming_status(
    engine: sa.Engine,
) -> None:
    repo = LessonRepository(engine)
    repo.add(LessonRecord("a.old", "x", status="active"))
    repo.add(LessonRecord("a.new", "x", status="active"))
    repo.add(LessonRecord("a.draft", "x"))
    repo.supersede("a.old", "a.new")
    before = counts(engine)
    for attempt in (
        lambda: repo.activate("a.old"),
        lambda: repo.retire("a.old"),
        lambda: repo.supersede("a.draft", "a.new"),  # proposed → superseded: retire it instead
        lambda: repo.import_records([LessonRecord("a.old", "x", status="active")]),
    ):
        with pytest.raises(ValidationError) as raised:
            attempt()
        assert raised.value.field == "status"
    assert counts(engine) == before
    assert [r.status for r in repo.list()] == ["proposed", "active", "superseded"]


# -- created_at cannot be rewritten -------------------------------------------------------------


@SQLITE_ONLY
def test_insert_or_replace_cannot_rewrite_a_lesson_on_sqlite(lesson: sa.Engine) -> None:
    created = LessonRepository(lesson).get("a.b").created_at
    for statement in (
        "INSERT OR REPLACE INTO lessons (entity_id, status, injection_form, created_at) "
        "VALUES ('a.b', 'active', 'Do X.', '2001-01-01 00:00:00')",
        "REPLACE INTO lessons (entity_id, status, injection_form) VALUES ('a.b', 'active', 'y')",
        "INSERT INTO lessons (entity_id, status, injection_form) VALUES ('a.b', 'active', 'y') "
        "ON CONFLICT (entity_id) DO UPDATE SET created_at = '2001-01-01 00:00:00'",
    ):
        assert "lessons.entity_id exists" in refused(lesson, statement)
    assert LessonRepository(lesson).get("a.b").created_at == created
    assert LessonRepository(lesson).get("a.b").applies_to == ("tag:x",)


def test_an_upsert_cannot_rewrite_created_at(lesson: sa.Engine) -> None:
    created = LessonRepository(lesson).get("a.b").created_at
    refused(
        lesson,
        "INSERT INTO lessons (entity_id, status, injection_form, created_at) "
        "VALUES ('a.b', 'active', 'y', '2001-01-01 00:00:00') "
        "ON CONFLICT (entity_id) DO UPDATE SET created_at = excluded.created_at",
    )
    assert LessonRepository(lesson).get("a.b").created_at == created


# -- a complete audit ---------------------------------------------------------------------------


def test_every_column_change_is_audited_with_old_and_new_values(lesson: sa.Engine) -> None:
    run(
        lesson,
        "UPDATE lessons SET injection_form = 'Do Y.', severity = 'critical', summary = 's'",
        "UPDATE lessons SET evidence = '{\"runs\": 3}'",
        "UPDATE lessons SET detail = detail",  # no change: no event
    )
    who = sql_actor(lesson)
    assert audit(lesson)[2:] == [
        (
            "update",
            None,
            None,
            who,
            {
                "injection_form": {"old": "Do X.", "new": "Do Y."},
                "severity": {"old": "info", "new": "critical"},
                "summary": {"old": "", "new": "s"},
            },
        ),
        ("update", None, None, who, {"evidence": {"old": {}, "new": {"runs": 3}}}),
    ]


def test_scope_key_changes_are_audited(lesson: sa.Engine) -> None:
    run(
        lesson,
        "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES ('a.b', 'tag:y', 1)",
        "UPDATE lesson_scopes SET scope_key = 'tag:z' WHERE scope_key = 'tag:x'",
        "DELETE FROM lesson_scopes WHERE scope_key = 'tag:y'",
    )
    who = sql_actor(lesson)
    assert audit(lesson)[1:] == [
        ("scope", None, None, who, {"added": "tag:x"}),
        ("scope", None, None, who, {"added": "tag:y"}),
        ("scope", None, None, who, {"removed": "tag:x"}),
        ("scope", None, None, who, {"added": "tag:z"}),
        ("scope", None, None, who, {"removed": "tag:y"}),
    ]


def test_insert_and_delete_events_hold_the_whole_row(lesson: sa.Engine) -> None:
    run(lesson, "DELETE FROM lessons")
    events = audit(lesson)
    assert [e[0] for e in events] == ["insert", "scope", "delete"]
    inserted, deleted = events[0][4], events[2][4]
    assert inserted == deleted
    assert {k: inserted[k] for k in ("entity_id", "status", "injection_form", "evidence")} == {
        "entity_id": "a.b",
        "status": "active",
        "injection_form": "Do X.",
        "evidence": {},
    }


def test_updated_at_is_set_by_the_database_on_a_plain_sql_update(lesson: sa.Engine) -> None:
    run(lesson, "UPDATE lessons SET updated_at = '2001-01-01 00:00:00'")  # explicit: kept
    repo = LessonRepository(lesson)
    assert repo.get("a.b").updated_at.year == 2001  # type: ignore[union-attr]
    run(lesson, "UPDATE lessons SET summary = 'changed'")
    record = repo.get("a.b")
    assert record.updated_at is not None and record.created_at is not None
    assert record.updated_at >= record.created_at and record.updated_at.year > 2001


@POSTGRES_ONLY
def test_the_postgres_actor_is_the_session_setting_else_the_database_user(
    lesson: sa.Engine,
) -> None:
    run(
        lesson,
        "SET LOCAL contextstore.actor = 'alice'",
        "UPDATE lessons SET summary = 'by alice'",
    )
    run(lesson, "UPDATE lessons SET summary = 'by the database user'")
    assert [e[3] for e in audit(lesson)] == ["postgres", "postgres", "alice", "postgres"]


def test_the_repository_records_its_actor_and_leaves_nothing_behind(engine: sa.Engine) -> None:
    repo = LessonRepository(engine, actor="agent-7")
    repo.add(LessonRecord("a.b", "x", status="active", applies_to=("tag:x",)))
    repo.retire("a.b")
    with pytest.raises(ValidationError):  # refused by the database: rolled back, actor too
        repo.as_actor("bob").update("a.b", severity="urgent")
    with Session(engine) as session:
        repo.as_actor("carol").using(session).update("a.b", summary="in a unit of work")
        session.commit()
    # Plain SQL afterwards is not attributed to the last library writer.
    run(engine, "UPDATE lessons SET detail = 'by hand'")
    assert [(e[0], e[3]) for e in audit(engine)] == [
        ("insert", "agent-7"),
        ("scope", "agent-7"),
        ("status", "agent-7"),
        ("update", "carol"),
        ("update", sql_actor(engine)),
    ]
    if engine.dialect.name == "sqlite":
        run(engine, "SELECT 1")
        with engine.connect() as connection:
            left = connection.exec_driver_sql("SELECT count(*) FROM lesson_audit_actor").scalar()
        assert left == 0


def test_the_default_actor_is_the_operating_system_user(engine: sa.Engine) -> None:
    repo = LessonRepository(engine)
    assert repo.actor == getpass.getuser()
    repo.add(LessonRecord("a.b", "x"))
    assert {e[3] for e in audit(engine)} == {getpass.getuser()}


@pytest.mark.parametrize("actor", ["", "   ", "x" * 256, "bad\nactor", 7])
def test_a_bad_actor_is_refused_naming_actor(engine: sa.Engine, actor: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        LessonRepository(engine, actor=actor)
    assert raised.value.field == "actor"


# -- the audit is append-only -------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE lesson_events SET actor = 'someone else'",
        "UPDATE lesson_events SET event = 'insert' WHERE event = 'delete'",
        "DELETE FROM lesson_events",
        "DELETE FROM lesson_events WHERE event = 'delete'",
    ],
)
def test_lesson_events_refuses_update_and_delete(lesson: sa.Engine, statement: str) -> None:
    run(lesson, "DELETE FROM lessons")
    before = audit(lesson)
    assert "append-only" in refused(lesson, statement)
    assert audit(lesson) == before


@SQLITE_ONLY
def test_replace_into_lesson_events_is_refused_on_sqlite(lesson: sa.Engine) -> None:
    before = audit(lesson)
    assert "append-only" in refused(
        lesson,
        "REPLACE INTO lesson_events (id, lesson_id, event, actor) VALUES (1, 'a.b', 'forged', 'x')",
    )
    assert audit(lesson) == before


@POSTGRES_ONLY
@pytest.mark.parametrize(
    "statement",
    [
        "TRUNCATE lessons CASCADE",
        "TRUNCATE lesson_events",
        "TRUNCATE lesson_scopes",
        "TRUNCATE lessons, lesson_scopes, lesson_events",
    ],
)
def test_truncate_is_refused_on_postgres(lesson: sa.Engine, statement: str) -> None:
    before = audit(lesson)
    assert "append-only" in refused(lesson, statement)
    assert audit(lesson) == before


# -- what SQLite would otherwise store ----------------------------------------------------------


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("created_at", "yesterday"),
        ("created_at", "2026-02-30 00:00:00"),
        ("created_at", "0001-01-01 00:00:00+05:00"),  # before year 1 in UTC
        ("created_at", "9999-12-31 23:00:00-05:00"),  # after year 9999 in UTC
        ("created_at", "20260102"),
        ("updated_at", "soon"),
        ("evidence", "{not json"),
        ("evidence", ""),
    ],
)
def test_sqlite_refuses_malformed_timestamps_and_evidence(
    engine: sa.Engine, column: str, value: str
) -> None:
    insert = (
        f"INSERT INTO lessons (entity_id, status, injection_form, {column}) "
        "VALUES ('a.b', 'active', 'x', :value)"
    )
    assert f"lessons.{column}" in refused(engine, insert, value=value)
    run(
        engine,
        "INSERT INTO lessons (entity_id, status, injection_form) VALUES ('a.b', 'active', 'x')",
    )
    assert f"lessons.{column}" in refused(
        engine, f"UPDATE lessons SET {column} = :value", value=value
    )


@SQLITE_ONLY
@pytest.mark.parametrize(
    "value", ["2026-01-02 03:04:05", "2026-01-02 03:04:05.5", "2026-01-02T03:04:05.5+02:00"]
)
def test_sqlite_accepts_every_timestamp_form_the_library_reads(
    engine: sa.Engine, value: str
) -> None:
    run(
        engine,
        "INSERT INTO lessons (entity_id, status, injection_form, created_at) "
        "VALUES ('a.b', 'active', 'x', :value)",
        value=value,
    )
    assert LessonRepository(engine).get("a.b").created_at is not None
