"""Audit every change with its actor; enforce the lifecycle; keep the audit append-only.

Revision ID: 0003_audit
Revises: 0004_knowledge
Create Date: 2026-12-01

- ``lesson_events`` gains ``actor`` and ``changes`` (JSON). Events written before this
  revision keep ``actor`` NULL (nobody was recorded then); every later row has one.
- Audited: an insert (``changes`` = the new row), every UPDATE that changes a column
  (``changes`` = ``{"column": {"old": …, "new": …}}``; event ``status`` when the status
  moved, else ``update``), a scope key added or removed (event ``scope``, ``changes`` =
  ``{"added": key}`` / ``{"removed": key}``), and a delete (``changes`` = the old row). The keys
  of a deleted lesson leave with it through the foreign key's cascade and are not listed
  again.
- The actor: PostgreSQL reads the transaction setting ``contextstore.actor``, else
  ``current_user``. SQLite has no session settings, so a writer that knows its actor puts it in
  the one-row table ``lesson_audit_actor`` inside its own write transaction and removes it
  before committing; SQLite admits one writer at a time, so no other transaction ever sees
  that row. A plain-SQL writer leaves the table empty and is recorded as ``sql``.
- ``updated_at`` is set by the database on every UPDATE that changes a column but not
  ``updated_at`` itself (an explicit value, as an import restoring a backup writes, is kept).
- The lifecycle: proposed → active | retired; active → retired | superseded; retired →
  active; superseded is final.
- ``lesson_events`` refuses UPDATE and DELETE, and a REPLACE over an existing event. On
  PostgreSQL, TRUNCATE of lessons, lesson_scopes and lesson_events is refused.
- SQLite: inserting a lesson whose entity_id exists is refused before conflict resolution
  runs, so ``INSERT OR REPLACE`` (which deletes the old row silently, firing no delete trigger,
  and writes a new ``created_at``) and upserts cannot rewrite a lesson; use UPDATE. Timestamps
  must be ISO 8601 text both SQLite and Python read (``YYYY-MM-DD HH:MM:SS[.ffffff][±HH:MM]``,
  a real calendar date, years 1–9999 in UTC) and ``evidence`` must be JSON text. These are
  triggers rather than CHECK constraints: adding a CHECK needs a table rebuild, and dropping
  ``lessons`` inside the migration's transaction (where ``PRAGMA foreign_keys`` cannot be
  switched off) would cascade-delete every scope key; a trigger also lets a database holding
  an old bad row upgrade, keeping that row, instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_audit"
down_revision: str | Sequence[str] | None = "0004_knowledge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The transitions the lifecycle allows, as SQL over OLD.status / NEW.status.
TRANSITIONS = (
    "(OLD.status = 'proposed' AND NEW.status IN ('active', 'retired')) "
    "OR (OLD.status = 'active' AND NEW.status IN ('retired', 'superseded')) "
    "OR (OLD.status = 'retired' AND NEW.status = 'active')"
)
LIFECYCLE_MESSAGE = (
    "lesson lifecycle: proposed -> active|retired, active -> retired|superseded, "
    "retired -> active; superseded is final"
)

# -- PostgreSQL ---------------------------------------------------------------------------------

POSTGRES_ACTOR = "COALESCE(NULLIF(current_setting('contextstore.actor', true), ''), current_user)"

POSTGRES_UPGRADE = [
    f"""
    CREATE FUNCTION contextstore_lessons_lifecycle() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF NEW.status IS DISTINCT FROM OLD.status AND NOT ({TRANSITIONS}) THEN
            RAISE EXCEPTION '{LIFECYCLE_MESSAGE} (lessons.status %: % -> %)',
                OLD.entity_id, OLD.status, NEW.status USING ERRCODE = '23000';
        END IF;
        IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at
           AND (NEW.status, NEW.severity, NEW.summary, NEW.detail, NEW.injection_form,
                NEW.superseded_by, NEW.evidence::jsonb)
               IS DISTINCT FROM
               (OLD.status, OLD.severity, OLD.summary, OLD.detail, OLD.injection_form,
                OLD.superseded_by, OLD.evidence::jsonb) THEN
            NEW.updated_at := clock_timestamp();
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER lessons_lifecycle BEFORE UPDATE ON lessons
    FOR EACH ROW EXECUTE FUNCTION contextstore_lessons_lifecycle()
    """,
    f"""
    CREATE OR REPLACE FUNCTION contextstore_lessons_audit() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
        who text := {POSTGRES_ACTOR};
        diff jsonb;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO lesson_events
                (lesson_id, event, old_status, new_status, actor, changes, occurred_at)
            VALUES (NEW.entity_id, 'insert', NULL, NEW.status, who, to_jsonb(NEW),
                    clock_timestamp());
            RETURN NEW;
        ELSIF TG_OP = 'UPDATE' THEN
            SELECT jsonb_object_agg(n.key, jsonb_build_object('old', o.value, 'new', n.value))
              INTO diff
              FROM jsonb_each(to_jsonb(NEW)) AS n
              JOIN jsonb_each(to_jsonb(OLD)) AS o ON o.key = n.key
             WHERE n.value IS DISTINCT FROM o.value AND n.key <> 'updated_at';
            IF diff IS NOT NULL THEN
                IF NEW.status IS DISTINCT FROM OLD.status THEN
                    INSERT INTO lesson_events
                        (lesson_id, event, old_status, new_status, actor, changes, occurred_at)
                    VALUES (NEW.entity_id, 'status', OLD.status, NEW.status, who, diff,
                            clock_timestamp());
                ELSE
                    INSERT INTO lesson_events
                        (lesson_id, event, old_status, new_status, actor, changes, occurred_at)
                    VALUES (NEW.entity_id, 'update', NULL, NULL, who, diff, clock_timestamp());
                END IF;
            END IF;
            RETURN NEW;
        END IF;
        INSERT INTO lesson_events
            (lesson_id, event, old_status, new_status, actor, changes, occurred_at)
        VALUES (OLD.entity_id, 'delete', OLD.status, NULL, who, to_jsonb(OLD), clock_timestamp());
        RETURN OLD;
    END
    $$
    """,
    f"""
    CREATE FUNCTION contextstore_lesson_scopes_audit() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
        who text := {POSTGRES_ACTOR};
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE')
           AND EXISTS (SELECT 1 FROM lessons WHERE entity_id = OLD.lesson_id) THEN
            INSERT INTO lesson_events (lesson_id, event, actor, changes, occurred_at)
            VALUES (OLD.lesson_id, 'scope', who, jsonb_build_object('removed', OLD.scope_key),
                    clock_timestamp());
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO lesson_events (lesson_id, event, actor, changes, occurred_at)
            VALUES (NEW.lesson_id, 'scope', who, jsonb_build_object('added', NEW.scope_key),
                    clock_timestamp());
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER lesson_scopes_audit
    AFTER INSERT OR DELETE OR UPDATE OF lesson_id, scope_key ON lesson_scopes
    FOR EACH ROW EXECUTE FUNCTION contextstore_lesson_scopes_audit()
    """,
    """
    CREATE FUNCTION contextstore_refuse() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% of %: the lesson audit is append-only', TG_OP, TG_TABLE_NAME
            USING ERRCODE = '23000';
    END
    $$
    """,
    """
    CREATE TRIGGER lesson_events_append_only BEFORE UPDATE OR DELETE ON lesson_events
    FOR EACH ROW EXECUTE FUNCTION contextstore_refuse()
    """,
    *(
        f"""
        CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION contextstore_refuse()
        """
        for table in ("lessons", "lesson_scopes", "lesson_events")
    ),
]

# The 0002 audit function, restored on downgrade.
POSTGRES_0002_AUDIT = """
    CREATE OR REPLACE FUNCTION contextstore_lessons_audit() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO lesson_events (lesson_id, event, old_status, new_status)
            VALUES (NEW.entity_id, 'insert', NULL, NEW.status);
            RETURN NEW;
        ELSIF TG_OP = 'UPDATE' THEN
            IF NEW.status IS DISTINCT FROM OLD.status THEN
                INSERT INTO lesson_events (lesson_id, event, old_status, new_status)
                VALUES (NEW.entity_id, 'status', OLD.status, NEW.status);
            END IF;
            RETURN NEW;
        END IF;
        INSERT INTO lesson_events (lesson_id, event, old_status, new_status)
        VALUES (OLD.entity_id, 'delete', OLD.status, NULL);
        RETURN OLD;
    END
    $$
"""

POSTGRES_DOWNGRADE = [
    *(
        f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}"
        for table in ("lessons", "lesson_scopes", "lesson_events")
    ),
    "DROP TRIGGER IF EXISTS lesson_events_append_only ON lesson_events",
    "DROP FUNCTION IF EXISTS contextstore_refuse()",
    "DROP TRIGGER IF EXISTS lesson_scopes_audit ON lesson_scopes",
    "DROP FUNCTION IF EXISTS contextstore_lesson_scopes_audit()",
    POSTGRES_0002_AUDIT,
    "DROP TRIGGER IF EXISTS lessons_lifecycle ON lessons",
    "DROP FUNCTION IF EXISTS contextstore_lessons_lifecycle()",
]
POSTGRES_0002_TRIGGERS: list[str] = []

# -- SQLite -------------------------------------------------------------------------------------

NO_REPLACE_MESSAGE = (
    "lessons.entity_id exists: a lesson is changed by UPDATE, "
    "never by INSERT OR REPLACE or an upsert"
)
# Timestamps as 0002 writes them: naive UTC with microseconds.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'"
SQLITE_ACTOR = "COALESCE((SELECT actor FROM lesson_audit_actor WHERE id = 1), 'sql')"


def _sqlite_timestamp_ok(column: str) -> str:
    """``column`` is text the library can read: an ISO 8601 date and time SQLite also reads
    (offset optional), a real calendar date, in UTC between years 1 and 9999."""
    return (
        f"(typeof({column}) = 'text' "
        f"AND {column} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
        f"AND date(julianday(substr({column}, 1, 10))) = substr({column}, 1, 10) "
        f"AND datetime({column}) >= '0001-01-01 00:00:00')"
    )


def _sqlite_json(column: str) -> str:
    """``column`` as JSON when it is valid JSON, else as the raw text (an old bad row)."""
    return f"CASE WHEN json_valid({column}) THEN json({column}) ELSE {column} END"


def _sqlite_row(alias: str) -> str:
    columns = (
        "entity_id",
        "status",
        "severity",
        "created_at",
        "updated_at",
        "summary",
        "detail",
        "injection_form",
        "superseded_by",
    )
    pairs = ", ".join(f"'{name}', {alias}.{name}" for name in columns)
    return f"json_object({pairs}, 'evidence', {_sqlite_json(f'{alias}.evidence')})"


AUDITED = ("status", "severity", "summary", "detail", "injection_form", "superseded_by")
SQLITE_CHANGED = " OR ".join(f"OLD.{name} IS NOT NEW.{name}" for name in (*AUDITED, "evidence"))
SQLITE_DIFF = (
    "(SELECT json_group_object(c.value ->> '$[0]', "
    "json_object('old', c.value -> '$[1]', 'new', c.value -> '$[2]')) "
    "FROM json_each(json_array("
    + ", ".join(f"json_array('{name}', OLD.{name}, NEW.{name})" for name in AUDITED)
    + f", json_array('evidence', {_sqlite_json('OLD.evidence')}, {_sqlite_json('NEW.evidence')})"
    ")) AS c WHERE (c.value -> '$[1]') IS NOT (c.value -> '$[2]'))"
)


def _sqlite_valid(alias: str) -> list[str]:
    """Statements raising when a row's timestamps or evidence are not what the library reads.

    COALESCE: a NULL from a date function (an impossible date) must refuse, not pass.
    """
    timestamp = "must be an ISO 8601 date and time (YYYY-MM-DD HH:MM:SS)"
    evidence = f"typeof({alias}.evidence) = 'text' AND json_valid({alias}.evidence)"
    return [
        f"SELECT RAISE(ABORT, 'lessons.created_at {timestamp}') "
        f"WHERE NOT COALESCE({_sqlite_timestamp_ok(f'{alias}.created_at')}, 0);",
        f"SELECT RAISE(ABORT, 'lessons.updated_at {timestamp}') "
        f"WHERE NOT COALESCE({_sqlite_timestamp_ok(f'{alias}.updated_at')}, 0);",
        "SELECT RAISE(ABORT, 'lessons.evidence must be JSON text') "
        f"WHERE NOT COALESCE({evidence}, 0);",
    ]


def _event(lesson_id: str, event: str, old: str, new: str, changes: str, when: str = "") -> str:
    """One audit row; ``when`` makes it conditional (SQL over OLD/NEW)."""
    return (
        "INSERT INTO lesson_events "
        "(lesson_id, event, old_status, new_status, actor, changes, occurred_at) "
        f"SELECT {lesson_id}, '{event}', {old}, {new}, {SQLITE_ACTOR}, {changes}, {SQLITE_NOW}"
        f"{f' WHERE {when}' if when else ''};"
    )


SQLITE_UPGRADE = [
    """
    CREATE TABLE lesson_audit_actor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        actor TEXT NOT NULL
    )
    """,
    "DROP TRIGGER lessons_audit_insert",
    "DROP TRIGGER lessons_audit_status",
    "DROP TRIGGER lessons_audit_delete",
    f"""
    CREATE TRIGGER lessons_no_replace BEFORE INSERT ON lessons
    FOR EACH ROW WHEN EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.entity_id)
    BEGIN
        SELECT RAISE(ABORT, '{NO_REPLACE_MESSAGE}');
    END
    """,
    f"""
    CREATE TRIGGER lessons_valid_insert BEFORE INSERT ON lessons
    FOR EACH ROW
    BEGIN
        {" ".join(_sqlite_valid("NEW"))}
    END
    """,
    f"""
    CREATE TRIGGER lessons_valid_update
    BEFORE UPDATE OF created_at, updated_at, evidence ON lessons
    FOR EACH ROW
    BEGIN
        {" ".join(_sqlite_valid("NEW"))}
    END
    """,
    f"""
    CREATE TRIGGER lessons_lifecycle BEFORE UPDATE OF status ON lessons
    FOR EACH ROW WHEN NEW.status IS NOT OLD.status AND NOT ({TRANSITIONS})
    BEGIN
        SELECT RAISE(ABORT, '{LIFECYCLE_MESSAGE} (lessons.status)');
    END
    """,
    f"""
    CREATE TRIGGER lessons_touch AFTER UPDATE ON lessons
    FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at AND ({SQLITE_CHANGED})
    BEGIN
        UPDATE lessons SET updated_at = {SQLITE_NOW} WHERE entity_id = NEW.entity_id;
    END
    """,
    f"""
    CREATE TRIGGER lessons_audit_insert AFTER INSERT ON lessons
    FOR EACH ROW
    BEGIN
        {_event("NEW.entity_id", "insert", "NULL", "NEW.status", _sqlite_row("NEW"))}
    END
    """,
    f"""
    CREATE TRIGGER lessons_audit_update AFTER UPDATE ON lessons
    FOR EACH ROW WHEN {SQLITE_CHANGED}
    BEGIN
        {
        _event(
            "NEW.entity_id",
            "status",
            "OLD.status",
            "NEW.status",
            SQLITE_DIFF,
            "NEW.status IS NOT OLD.status",
        )
    }
        {_event("NEW.entity_id", "update", "NULL", "NULL", SQLITE_DIFF, "NEW.status IS OLD.status")}
    END
    """,
    f"""
    CREATE TRIGGER lessons_audit_delete AFTER DELETE ON lessons
    FOR EACH ROW
    BEGIN
        {_event("OLD.entity_id", "delete", "OLD.status", "NULL", _sqlite_row("OLD"))}
    END
    """,
    f"""
    CREATE TRIGGER lesson_scopes_audit_insert AFTER INSERT ON lesson_scopes
    FOR EACH ROW
    BEGIN
        {_event("NEW.lesson_id", "scope", "NULL", "NULL", "json_object('added', NEW.scope_key)")}
    END
    """,
    f"""
    CREATE TRIGGER lesson_scopes_audit_delete AFTER DELETE ON lesson_scopes
    FOR EACH ROW WHEN EXISTS (SELECT 1 FROM lessons WHERE entity_id = OLD.lesson_id)
    BEGIN
        {_event("OLD.lesson_id", "scope", "NULL", "NULL", "json_object('removed', OLD.scope_key)")}
    END
    """,
    f"""
    CREATE TRIGGER lesson_scopes_audit_update AFTER UPDATE OF lesson_id, scope_key
    ON lesson_scopes
    FOR EACH ROW
    BEGIN
        {_event("OLD.lesson_id", "scope", "NULL", "NULL", "json_object('removed', OLD.scope_key)")}
        {_event("NEW.lesson_id", "scope", "NULL", "NULL", "json_object('added', NEW.scope_key)")}
    END
    """,
    """
    CREATE TRIGGER lesson_events_no_update BEFORE UPDATE ON lesson_events
    BEGIN
        SELECT RAISE(ABORT, 'UPDATE of lesson_events: the lesson audit is append-only');
    END
    """,
    """
    CREATE TRIGGER lesson_events_no_delete BEFORE DELETE ON lesson_events
    BEGIN
        SELECT RAISE(ABORT, 'DELETE of lesson_events: the lesson audit is append-only');
    END
    """,
    """
    CREATE TRIGGER lesson_events_no_replace BEFORE INSERT ON lesson_events
    FOR EACH ROW WHEN EXISTS (SELECT 1 FROM lesson_events WHERE id = NEW.id)
    BEGIN
        SELECT RAISE(ABORT, 'REPLACE of lesson_events: the lesson audit is append-only');
    END
    """,
]

# 0002's SQLite audit triggers, restored on downgrade.
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lesson_events_no_replace",
    "DROP TRIGGER IF EXISTS lesson_events_no_delete",
    "DROP TRIGGER IF EXISTS lesson_events_no_update",
    "DROP TRIGGER IF EXISTS lesson_scopes_audit_update",
    "DROP TRIGGER IF EXISTS lesson_scopes_audit_delete",
    "DROP TRIGGER IF EXISTS lesson_scopes_audit_insert",
    "DROP TRIGGER IF EXISTS lessons_audit_delete",
    "DROP TRIGGER IF EXISTS lessons_audit_update",
    "DROP TRIGGER IF EXISTS lessons_audit_insert",
    "DROP TRIGGER IF EXISTS lessons_touch",
    "DROP TRIGGER IF EXISTS lessons_lifecycle",
    "DROP TRIGGER IF EXISTS lessons_valid_update",
    "DROP TRIGGER IF EXISTS lessons_valid_insert",
    "DROP TRIGGER IF EXISTS lessons_no_replace",
    "DROP TABLE IF EXISTS lesson_audit_actor",
]
SQLITE_0002_TRIGGERS = [
    f"""
    CREATE TRIGGER lessons_audit_insert AFTER INSERT ON lessons
    FOR EACH ROW
    BEGIN
        INSERT INTO lesson_events (lesson_id, event, old_status, new_status, occurred_at)
        VALUES (NEW.entity_id, 'insert', NULL, NEW.status, {SQLITE_NOW});
    END
    """,
    f"""
    CREATE TRIGGER lessons_audit_status AFTER UPDATE OF status ON lessons
    FOR EACH ROW WHEN NEW.status IS NOT OLD.status
    BEGIN
        INSERT INTO lesson_events (lesson_id, event, old_status, new_status, occurred_at)
        VALUES (NEW.entity_id, 'status', OLD.status, NEW.status, {SQLITE_NOW});
    END
    """,
    f"""
    CREATE TRIGGER lessons_audit_delete AFTER DELETE ON lessons
    FOR EACH ROW
    BEGIN
        INSERT INTO lesson_events (lesson_id, event, old_status, new_status, occurred_at)
        VALUES (OLD.entity_id, 'delete', OLD.status, NULL, {SQLITE_NOW});
    END
    """,
]


def _dialect() -> str:
    dialect = op.get_bind().dialect.name
    if dialect not in ("postgresql", "sqlite"):
        raise NotImplementedError(
            f"contextstore migrations support sqlite and postgresql, not {dialect}"
        )
    return dialect


def upgrade() -> None:
    dialect = _dialect()
    op.add_column("lesson_events", sa.Column("actor", sa.String(255), nullable=True))
    op.add_column("lesson_events", sa.Column("changes", sa.JSON(), nullable=True))
    for statement in POSTGRES_UPGRADE if dialect == "postgresql" else SQLITE_UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    dialect = _dialect()
    for statement in POSTGRES_DOWNGRADE if dialect == "postgresql" else SQLITE_DOWNGRADE:
        op.execute(statement)
    # SQLite drops a column by rebuilding the table (batch mode); nothing refers to
    # lesson_events by foreign key, so the rebuild cannot cascade anywhere. It runs while no
    # trigger names lesson_events (SQLite checks triggers when the copy is renamed), then
    # 0002's triggers come back.
    with op.batch_alter_table("lesson_events") as batch:
        batch.drop_column("changes")
        batch.drop_column("actor")
    for statement in POSTGRES_0002_TRIGGERS if dialect == "postgresql" else SQLITE_0002_TRIGGERS:
        op.execute(statement)
