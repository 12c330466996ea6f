"""The database itself enforces the lesson rules, for anyone typing plain SQL.

Every test runs on SQLite and PostgreSQL (see conftest). Statements are raw ``text()`` SQL,
exactly what an administrator would type, relying on the columns' server defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

INSERT = sa.text(
    "INSERT INTO lessons (entity_id, status, severity, injection_form, superseded_by) "
    "VALUES (:entity_id, :status, :severity, :injection_form, :superseded_by)"
)


def insert(connection: sa.Connection, entity_id: str = "fleet.ops.1", **values: Any) -> None:
    row = {"status": "active", "severity": "info", "injection_form": "Do X.", "superseded_by": None}
    connection.execute(INSERT, {"entity_id": entity_id, **row, **values})


def events(connection: sa.Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(row)
        for row in connection.execute(
            sa.text(
                "SELECT lesson_id, event, old_status, new_status FROM lesson_events ORDER BY id"
            )
        )
    ]


@pytest.fixture
def lesson(engine: sa.Engine) -> sa.Engine:
    """The engine, with one active lesson ``fleet.ops.1`` keyed ``tag:ops``."""
    with engine.begin() as connection:
        insert(connection)
        connection.execute(
            sa.text(
                "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                "VALUES ('fleet.ops.1', 'tag:ops', 0)"
            )
        )
    return engine


def refused(engine: sa.Engine, statement: str, **params: Any) -> None:
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        connection.execute(sa.text(statement), params)


def test_a_lesson_inserted_in_plain_sql_reads_back_through_the_library(lesson: sa.Engine) -> None:
    from contextstore.backends.sql.repository import LessonRepository

    record = LessonRepository(lesson).get("fleet.ops.1")
    assert record.created_at is not None and record.created_at.tzinfo is not None
    assert record.updated_at == record.created_at
    assert (record.summary, record.detail, record.evidence) == ("", "", {})
    assert record.applies_to == ("tag:ops",)
    assert [e.event for e in LessonRepository(lesson).history()] == ["insert", "scope"]


def test_update_of_created_at_is_refused(lesson: sa.Engine) -> None:
    refused(
        lesson,
        "UPDATE lessons SET created_at = '2001-02-03 04:05:06' WHERE entity_id = 'fleet.ops.1'",
    )


def test_update_of_entity_id_is_refused(lesson: sa.Engine) -> None:
    refused(lesson, "UPDATE lessons SET entity_id = 'fleet.ops.2' WHERE entity_id = 'fleet.ops.1'")


def test_other_updates_pass_the_immutability_trigger(lesson: sa.Engine) -> None:
    with lesson.begin() as connection:
        connection.execute(sa.text("UPDATE lessons SET summary = 'ok', created_at = created_at"))
        assert connection.execute(sa.text("SELECT summary FROM lessons")).scalar_one() == "ok"


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("severity", "urgent"),
        ("severity", "Critical"),
        ("status", "archived"),
        ("entity_id", ""),
        ("entity_id", ".a"),
        ("entity_id", "a."),
        ("entity_id", "a..b"),
        ("injection_form", "€" * 107),  # 321 UTF-8 bytes, 107 characters
        ("injection_form", "x" * 321),
    ],
)
def test_bad_lesson_values_are_refused(engine: sa.Engine, column: str, value: str) -> None:
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        insert(connection, **{column: value})


def test_a_320_byte_form_is_accepted(engine: sa.Engine) -> None:
    form = "€" * 106 + "xx"  # 318 + 2 = 320 bytes
    assert len(form.encode()) == 320
    with engine.begin() as connection:
        insert(connection, injection_form=form)
        stored = connection.execute(sa.text("SELECT injection_form FROM lessons")).scalar_one()
    assert stored == form


def test_superseded_requires_superseded_by_and_only_then(lesson: sa.Engine) -> None:
    with pytest.raises(sa.exc.IntegrityError), lesson.begin() as connection:
        insert(connection, "fleet.ops.2", status="superseded")
    with pytest.raises(sa.exc.IntegrityError), lesson.begin() as connection:
        insert(connection, "fleet.ops.2", status="active", superseded_by="fleet.ops.1")
    with pytest.raises(sa.exc.IntegrityError), lesson.begin() as connection:
        insert(connection, "fleet.ops.2", status="superseded", superseded_by="fleet.ops.2")
    with lesson.begin() as connection:
        insert(connection, "fleet.ops.2", status="superseded", superseded_by="fleet.ops.1")


def test_superseded_by_must_reference_a_lesson(engine: sa.Engine) -> None:
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        insert(connection, "fleet.ops.2", status="superseded", superseded_by="no.such.lesson")


@pytest.mark.parametrize("key", ["foo:bar", "tag:", "id:", "TAG:x", "Id:x", "ops", ""])
def test_bad_scope_keys_are_refused(lesson: sa.Engine, key: str) -> None:
    refused(
        lesson,
        "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES ('fleet.ops.1', :k, 1)",
        k=key,
    )


@pytest.mark.parametrize("key", ["tag:x", "id:a", "id:a.b.c", "tag:with space"])
def test_good_scope_keys_are_accepted(lesson: sa.Engine, key: str) -> None:
    with lesson.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                "VALUES ('fleet.ops.1', :k, 1)"
            ),
            {"k": key},
        )


def test_insert_status_change_and_delete_leave_audit_rows(lesson: sa.Engine) -> None:
    with lesson.begin() as connection:
        connection.execute(sa.text("UPDATE lessons SET status = 'retired'"))
        connection.execute(sa.text("UPDATE lessons SET summary = 'no status change'"))
        connection.execute(sa.text("DELETE FROM lesson_scopes"))
        connection.execute(sa.text("DELETE FROM lessons"))
        assert events(connection) == [
            ("fleet.ops.1", "insert", None, "active"),
            ("fleet.ops.1", "scope", None, None),
            ("fleet.ops.1", "status", "active", "retired"),
            ("fleet.ops.1", "update", None, None),
            ("fleet.ops.1", "scope", None, None),
            ("fleet.ops.1", "delete", "retired", None),
        ]
        stamps = connection.execute(sa.text("SELECT occurred_at FROM lesson_events")).all()
        assert all(stamp[0] is not None for stamp in stamps)


def test_a_refused_statement_leaves_no_audit_row(lesson: sa.Engine) -> None:
    refused(lesson, "UPDATE lessons SET status = 'bogus'")
    with lesson.connect() as connection:
        assert events(connection) == [
            ("fleet.ops.1", "insert", None, "active"),
            ("fleet.ops.1", "scope", None, None),
        ]


def test_deleting_a_lesson_cascades_to_its_scope_keys(lesson: sa.Engine) -> None:
    with lesson.begin() as connection:
        connection.execute(sa.text("DELETE FROM lessons"))
        count = connection.execute(sa.text("SELECT count(*) FROM lesson_scopes")).scalar_one()
    assert count == 0
