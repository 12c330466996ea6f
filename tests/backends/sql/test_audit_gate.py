"""The lesson audit holds only what the lesson triggers wrote (revision 0013).

A row typed into ``lesson_events`` by hand — history that never happened — is refused on
both databases; on PostgreSQL a role granted by ``contextstore db grant-service-role`` can
neither write the audit nor switch a trigger off, while the library works as that role and
the audit names it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Scope
from contextstore.store.sync import connect
from tests.backends.sql.conftest import POSTGRES_ONLY, SQLITE_ONLY

FORGED = (
    "INSERT INTO lesson_events (lesson_id, event, old_status, new_status, actor) "
    "VALUES ('ops.one', 'status', 'active', 'retired', 'alice')"
)
REFUSAL = "written by the lesson triggers alone"


@pytest.fixture
def audited(database_url: str) -> Iterator[sa.Engine]:
    """A database at head holding one active lesson, written through the library."""
    engine = create_database_engine(database_url)
    repo = LessonRepository(engine).as_actor("bob")
    repo.add(
        LessonRecord("ops.one", "Check the runbook.", status="active", applies_to=("tag:ops",))
    )
    yield engine
    engine.dispose()


def events(engine: sa.Engine) -> list[tuple[str, str, str | None, str | None]]:
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT lesson_id, event, new_status, actor FROM lesson_events ORDER BY id")
        )
        return [tuple(row) for row in rows]


def test_a_hand_typed_audit_row_is_refused(audited: sa.Engine) -> None:
    before = events(audited)
    assert before == [("ops.one", "insert", "active", "bob"), ("ops.one", "scope", None, "bob")]
    with pytest.raises(sa.exc.IntegrityError, match=REFUSAL), audited.begin() as connection:
        connection.execute(sa.text(FORGED))
    assert events(audited) == before
    # the triggers still write: the library's retire is audited, with its actor
    LessonRepository(audited).as_actor("carol").retire("ops.one")
    assert events(audited) == [*before, ("ops.one", "status", "retired", "carol")]


@SQLITE_ONLY
@pytest.mark.parametrize(
    "forged",
    [
        # the actor and time an audit trigger would write, but a status the lesson never had
        "INSERT INTO lesson_events (lesson_id, event, old_status, new_status, actor, "
        "occurred_at) SELECT 'ops.one', 'status', 'active', 'retired', 'sql', "
        "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'",
        # a delete of a lesson that is still there
        "INSERT INTO lesson_events (lesson_id, event, old_status, actor, occurred_at) "
        "SELECT 'ops.one', 'delete', 'active', 'sql', "
        "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'",
        # a scope key removed that is still stored
        "INSERT INTO lesson_events (lesson_id, event, actor, changes, occurred_at) "
        "SELECT 'ops.one', 'scope', 'sql', json_object('removed', 'tag:ops'), "
        "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'",
        # the right event at another time
        "INSERT INTO lesson_events (lesson_id, event, new_status, actor, occurred_at) "
        "VALUES ('ops.one', 'insert', 'active', 'sql', '2026-01-01 00:00:00.000000000')",
    ],
    ids=["status", "delete", "scope", "time"],
)
def test_sqlite_refuses_an_event_untrue_of_the_lesson(audited: sa.Engine, forged: str) -> None:
    before = events(audited)
    with pytest.raises(sa.exc.IntegrityError, match=REFUSAL), audited.begin() as connection:
        connection.execute(sa.text(forged))
    assert events(audited) == before


@pytest.fixture
def service_role(database_url: str) -> Iterator[tuple[str, str]]:
    """(role, its URL): a login role that owns nothing, granted by the CLI as the owner."""
    from contextstore.interfaces.cli.db import app

    role = f"cs_service_{uuid.uuid4().hex[:10]}"
    owner = create_database_engine(database_url)
    with owner.begin() as connection:
        connection.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
    try:
        granted = CliRunner().invoke(
            app, ["grant-service-role", role, "--database-url", database_url]
        )
        assert granted.exit_code == 0, granted.output
        assert "ON ALL TABLES IN SCHEMA" in granted.stdout
        url = sa.make_url(database_url).set(username=role, password=None)
        yield role, url.render_as_string(hide_password=False)
    finally:
        with owner.begin() as connection:
            connection.execute(sa.text(f"DROP OWNED BY {role}"))
            connection.execute(sa.text(f"DROP ROLE {role}"))
        owner.dispose()


# What the service's role must not be able to do: switch the audit off or rewrite it.
BYPASSES: dict[str, tuple[str, ...]] = {
    "replica": ("SET session_replication_role = replica",),
    "local-replica": ("SET LOCAL session_replication_role = replica",),
    "disable-trigger": ("ALTER TABLE lessons DISABLE TRIGGER lessons_audit",),
    "disable-all": ("ALTER TABLE lesson_events DISABLE TRIGGER ALL",),
    "drop-trigger": ("DROP TRIGGER lesson_events_from_triggers ON lesson_events",),
    "replace-function": (
        "CREATE OR REPLACE FUNCTION contextstore_lesson_events_gate() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
    ),
    "delete-audit": ("DELETE FROM lesson_events",),
    "truncate-audit": ("TRUNCATE lesson_events",),
    "update-audit": ("UPDATE lesson_events SET actor = 'alice'",),
    "forge-audit": (FORGED,),
    # a trigger of its own making, on a temporary table, relaying a forged row
    "own-trigger": (
        "CREATE TEMP TABLE relay (x int)",
        "CREATE FUNCTION pg_temp.relay() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO lesson_events (lesson_id, event, actor) "
        "VALUES ('ops.one', 'delete', 'alice'); RETURN NEW; END $$",
        "CREATE TRIGGER relay AFTER INSERT ON relay FOR EACH ROW EXECUTE FUNCTION pg_temp.relay()",
        "INSERT INTO relay VALUES (1)",
    ),
    "become-owner": ("SET ROLE postgres",),
}


@POSTGRES_ONLY
def test_the_service_role_works_and_cannot_touch_the_audit(
    audited: sa.Engine, service_role: tuple[str, str]
) -> None:
    role, url = service_role
    engine = create_database_engine(url)
    try:
        repo = LessonRepository(engine).as_actor("svc-app")
        repo.add(LessonRecord("ops.two", "Page the owner.", applies_to=("tag:ops",)))
        repo.retire("ops.one")
        assert [r.entity_id for r in repo.list()] == ["ops.one", "ops.two"]
        with engine.begin() as connection:  # SQL typed as the role: no actor set
            connection.execute(
                sa.text("UPDATE lessons SET status = 'active' WHERE entity_id = 'ops.two'")
            )
        before = events(audited)
        assert before[-3:] == [
            ("ops.two", "scope", None, "svc-app"),
            ("ops.one", "status", "retired", "svc-app"),
            ("ops.two", "status", "active", role),
        ]
        refused: dict[str, str] = {}
        for name, statements in BYPASSES.items():
            with pytest.raises(sa.exc.DBAPIError) as raised, engine.begin() as connection:
                for statement in statements:
                    connection.execute(sa.text(statement))
            refused[name] = type(raised.value.orig).__name__
        assert refused == dict.fromkeys(BYPASSES, "InsufficientPrivilege")
        assert events(audited) == before
    finally:
        engine.dispose()
    # The whole store works as the role: connect (migrate at head), documents, a run, metrics.
    with connect(database_url=url, redis_url="", namespace="ops") as store:
        store.knowledge.add("Drain the node before patching it.", "runbook.md")
        result = store.engine().run("how do I drain a node?", scope=Scope(tags=("ops",)))
        assert [lesson.entity_id for lesson in result.lessons.included] == ["ops.two"]
    with audited.connect() as connection:
        assert connection.execute(sa.text("SELECT count(*) FROM query_metrics")).scalar_one() == 1


@POSTGRES_ONLY
def test_grant_service_role_refuses_a_role_that_owns_the_tables(database_url: str) -> None:
    from contextstore.interfaces.cli.db import app

    result = CliRunner().invoke(
        app, ["grant-service-role", "postgres", "--database-url", database_url]
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: role: 'postgres' is a superuser")
