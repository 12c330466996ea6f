"""``lesson_events`` accepts rows from the lesson triggers alone.

Revision ID: 0013_audit_from_triggers
Revises: 0012_restorable_lessons
Create Date: 2026-12-02

Before this revision anyone who could insert into ``lesson_events`` could write history that
never happened (``INSERT INTO lesson_events … 'retired' … 'alice'``). Now:

- PostgreSQL: a BEFORE INSERT trigger refuses a row unless it is written from inside another
  trigger (``pg_trigger_depth() >= 2``). The two audit functions become SECURITY DEFINER, so
  they write ``lesson_events`` with their owner's rights: the service's role needs no INSERT
  on it (``contextstore db grant-service-role`` grants SELECT only), and a trigger of its own
  making (on a temporary table, say) cannot write there either. Inside a SECURITY DEFINER
  function ``current_user`` is the owner, so the actor recorded when none is set becomes
  ``session_user``: the role that logged in, as before for every role that does not
  ``SET ROLE``.
- SQLite has no trigger depth: a row must be exactly what an audit trigger writes at that
  moment: ``occurred_at`` the statement's own time (SQLite's ``'now'`` is fixed for a whole
  statement, triggers included), ``actor`` the one the writer set (else ``sql``), and the
  event true of the lesson right now (an ``insert`` or ``status`` event carries the lesson's
  stored status, a ``delete`` names a lesson that is gone, a scope key ``added`` is stored,
  one ``removed`` is not).

What the owner of the database can still do: docs/guides/operations.md (the audit) and
docs/decisions/0063.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013_audit_from_triggers"
down_revision: str | Sequence[str] | None = "0012_restorable_lessons"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GATE_MESSAGE = (
    "INSERT of lesson_events: the lesson audit is append-only and written by the lesson "
    "triggers alone"
)
AUDIT_FUNCTIONS = ("contextstore_lessons_audit", "contextstore_lesson_scopes_audit")

# -- PostgreSQL ---------------------------------------------------------------------------------


def _rewrite_audit(old: str, new: str, security: str) -> str:
    """Re-create each audit function with ``old`` replaced by ``new`` in its source, then set
    its security: the functions are 0003's, read back from the catalogue, not copied here."""
    names = ", ".join(f"'{name}'" for name in AUDIT_FUNCTIONS)
    return f"""
    DO $$
    DECLARE
        f record;
    BEGIN
        FOR f IN
            SELECT p.oid, pg_get_functiondef(p.oid) AS definition FROM pg_proc p
            WHERE p.proname IN ({names})
              AND p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
        LOOP
            EXECUTE replace(f.definition, '{old}', '{new}');
            EXECUTE format('ALTER FUNCTION %s {security}', f.oid::regprocedure);
        END LOOP;
    END
    $$
    """


POSTGRES_UPGRADE = [
    _rewrite_audit("current_user)", "session_user)", "SECURITY DEFINER"),
    f"""
    CREATE FUNCTION contextstore_lesson_events_gate() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF pg_trigger_depth() < 2 THEN
            RAISE EXCEPTION '{GATE_MESSAGE}' USING ERRCODE = '23000';
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER lesson_events_from_triggers BEFORE INSERT ON lesson_events
    FOR EACH ROW EXECUTE FUNCTION contextstore_lesson_events_gate()
    """,
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lesson_events_from_triggers ON lesson_events",
    "DROP FUNCTION IF EXISTS contextstore_lesson_events_gate()",
    _rewrite_audit("session_user)", "current_user)", "SECURITY INVOKER"),
]

# -- SQLite -------------------------------------------------------------------------------------

# As 0003 writes them.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'"
SQLITE_ACTOR = "COALESCE((SELECT actor FROM lesson_audit_actor WHERE id = 1), 'sql')"
_LESSON_IS = "EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.lesson_id AND status IS {})"
_SCOPE_STORED = (
    "EXISTS (SELECT 1 FROM lesson_scopes WHERE lesson_id = NEW.lesson_id "
    "AND scope_key = json_extract(NEW.changes, '$.{}'))"
)
SQLITE_FROM_TRIGGER = f"""
    NEW.occurred_at IS {SQLITE_NOW}
    AND NEW.actor IS {SQLITE_ACTOR}
    AND CASE NEW.event
        WHEN 'insert' THEN NEW.old_status IS NULL AND {_LESSON_IS.format("NEW.new_status")}
        WHEN 'status' THEN NEW.old_status IS NOT NEW.new_status
            AND {_LESSON_IS.format("NEW.new_status")}
        WHEN 'update' THEN NEW.old_status IS NULL AND NEW.new_status IS NULL
            AND EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.lesson_id)
        WHEN 'delete' THEN NEW.new_status IS NULL
            AND NOT EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.lesson_id)
        WHEN 'scope' THEN NEW.old_status IS NULL AND NEW.new_status IS NULL
            AND CASE
                WHEN json_type(NEW.changes, '$.added') = 'text' THEN {_SCOPE_STORED.format("added")}
                WHEN json_type(NEW.changes, '$.removed') = 'text'
                    THEN NOT {_SCOPE_STORED.format("removed")}
                ELSE 0
            END
        ELSE 0
    END
"""
SQLITE_UPGRADE = [
    f"""
    CREATE TRIGGER lesson_events_from_triggers BEFORE INSERT ON lesson_events
    FOR EACH ROW WHEN NOT COALESCE(({SQLITE_FROM_TRIGGER}), 0)
    BEGIN
        SELECT RAISE(ABORT, '{GATE_MESSAGE}');
    END
    """,
]
SQLITE_DOWNGRADE = ["DROP TRIGGER IF EXISTS lesson_events_from_triggers"]


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
