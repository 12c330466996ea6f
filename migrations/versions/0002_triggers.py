"""Triggers: created_at and entity_id are immutable; every insert, status change and delete
of a lesson writes an audit row into lesson_events.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-01

Triggers act on every writer — the library and a person typing SQL alike. Lessons that
already exist when this revision is applied keep their rows; their history starts here.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# PostgreSQL: plpgsql functions. ``SET search_path FROM CURRENT`` pins the schema the tables
# were migrated into, so the audit insert lands in the right place whatever search_path the
# administrator's session has. SQLSTATE 23000 makes drivers report an integrity error.
POSTGRES_UPGRADE = [
    """
    CREATE FUNCTION contextstore_lessons_immutable() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF NEW.entity_id IS DISTINCT FROM OLD.entity_id THEN
            RAISE EXCEPTION 'lessons.entity_id is immutable (%)', OLD.entity_id
                USING ERRCODE = '23000';
        END IF;
        IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'lessons.created_at is immutable (%)', OLD.entity_id
                USING ERRCODE = '23000';
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER lessons_immutable BEFORE UPDATE ON lessons
    FOR EACH ROW EXECUTE FUNCTION contextstore_lessons_immutable()
    """,
    """
    CREATE FUNCTION contextstore_lessons_audit() RETURNS trigger
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
    """,
    """
    CREATE TRIGGER lessons_audit AFTER INSERT OR UPDATE OR DELETE ON lessons
    FOR EACH ROW EXECUTE FUNCTION contextstore_lessons_audit()
    """,
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lessons_audit ON lessons",
    "DROP FUNCTION IF EXISTS contextstore_lessons_audit()",
    "DROP TRIGGER IF EXISTS lessons_immutable ON lessons",
    "DROP FUNCTION IF EXISTS contextstore_lessons_immutable()",
]

# SQLite: RAISE(ABORT, …) fails the statement with SQLITE_CONSTRAINT (an IntegrityError).
# Timestamps are written as naive UTC with microseconds, the format UTCDateTime reads.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'"
SQLITE_UPGRADE = [
    """
    CREATE TRIGGER lessons_immutable BEFORE UPDATE OF entity_id, created_at ON lessons
    FOR EACH ROW
    WHEN NEW.entity_id IS NOT OLD.entity_id OR NEW.created_at IS NOT OLD.created_at
    BEGIN
        SELECT RAISE(ABORT, 'lessons.entity_id and lessons.created_at are immutable');
    END
    """,
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
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lessons_audit_delete",
    "DROP TRIGGER IF EXISTS lessons_audit_status",
    "DROP TRIGGER IF EXISTS lessons_audit_insert",
    "DROP TRIGGER IF EXISTS lessons_immutable",
]


def _statements(postgres: list[str], sqlite: list[str]) -> list[str]:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        return postgres
    if dialect == "sqlite":
        return sqlite
    raise NotImplementedError(
        f"contextstore migrations support sqlite and postgresql, not {dialect}"
    )


def upgrade() -> None:
    for statement in _statements(POSTGRES_UPGRADE, SQLITE_UPGRADE):
        op.execute(statement)


def downgrade() -> None:
    for statement in _statements(POSTGRES_DOWNGRADE, SQLITE_DOWNGRADE):
        op.execute(statement)
