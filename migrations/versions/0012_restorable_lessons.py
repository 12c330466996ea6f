"""The database refuses a lesson row a backup could not restore.

Revision ID: 0012_restorable_lessons
Revises: 0010_metrics_autovacuum
Create Date: 2026-12-02

``contextstore lessons export`` writes what an import reads back, so a row the import would
refuse must not get into the database, whoever writes it (the library or SQL typed by hand):

- a ``superseded_by`` that closes a cycle (``a`` superseded by ``b``, ``b`` by ``a``);
- a ``superseded_by`` naming no lesson, and deleting a lesson another one is superseded by,
  on SQLite with ``PRAGMA foreign_keys`` off too, as the sqlite3 shell starts (the foreign key
  refuses both otherwise, at the end of the statement);
- ``evidence`` nested deeper than 64 arrays or objects, or holding a number no 64-bit float
  holds (``1e400``, which Python reads as infinity and JSON cannot carry).

- an ``entity_id`` or ``superseded_by`` with white space at an end (as Python's ``strip``
  sees it).

SQLite also refuses what PostgreSQL's types already do: a NUL in a text column or a scope key,
an id longer than 255 characters. And it keeps ``lesson_scopes`` tied to its lesson with
foreign keys off: a scope key for a missing lesson is refused, and deleting a lesson deletes
its keys.

Rows already stored are left as they are (an upgrade never fails on them):
``contextstore db check`` names each, and readers skip it. See docs/decisions/0062.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012_restorable_lessons"
down_revision: str | Sequence[str] | None = "0010_metrics_autovacuum"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_DEPTH = 64
# 2**1024 - 2**970: the least number a 64-bit float rounds to infinity.
FLOAT_OVERFLOW = (
    "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649"
    "017977587207096330286416692887910946555547851940402630657488671505820681908902000708383"
    "676273854845817711531764475730270069855571366959622842914819860834936475292719074168444"
    "365510704342711559699508093042880177904174497792"
)
CYCLE_MESSAGE = "lessons.superseded_by would close a supersede cycle"
MISSING_MESSAGE = "lessons.superseded_by names no lesson"
REFERENCED_MESSAGE = "lessons.entity_id is the superseded_by of another lesson; re-point it first"
DEPTH_MESSAGE = f"lessons.evidence nests deeper than {MAX_DEPTH} arrays or objects"
NUMBER_MESSAGE = "lessons.evidence holds a number beyond a 64-bit float"
SCOPE_MESSAGE = "lesson_scopes.lesson_id names no lesson"
# What Python's str.strip() removes: an id with any of these at an end is refused on import.
SPACES = (
    9,
    10,
    11,
    12,
    13,
    28,
    29,
    30,
    31,
    32,
    133,
    160,
    5760,
    *range(8192, 8203),
    8232,
    8233,
    8239,
    8287,
    12288,
)
TEXT_COLUMNS = ("entity_id", "summary", "detail", "injection_form", "superseded_by")

# -- PostgreSQL ---------------------------------------------------------------------------------

POSTGRES_UPGRADE = [
    f"""
    CREATE FUNCTION contextstore_lessons_restorable() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
        doc jsonb;
        spaces text := {" || ".join(f"chr({code})" for code in SPACES)};
    BEGIN
        IF NEW.entity_id <> btrim(NEW.entity_id, spaces) THEN
            RAISE EXCEPTION 'lessons.entity_id has white space at an end (%)', NEW.entity_id
                USING ERRCODE = '23000';
        END IF;
        IF NEW.superseded_by <> btrim(NEW.superseded_by, spaces) THEN
            RAISE EXCEPTION 'lessons.superseded_by has white space at an end (%)', NEW.entity_id
                USING ERRCODE = '23000';
        END IF;
        IF NEW.superseded_by IS NOT NULL
           AND (TG_OP = 'INSERT' OR NEW.superseded_by IS DISTINCT FROM OLD.superseded_by)
           AND EXISTS (
               WITH RECURSIVE chain(id) AS (
                   SELECT NEW.superseded_by
                   UNION
                   SELECT l.superseded_by FROM chain c JOIN lessons l ON l.entity_id = c.id
                   WHERE l.superseded_by IS NOT NULL
               )
               SELECT 1 FROM chain WHERE id = NEW.entity_id
           ) THEN
            RAISE EXCEPTION '{CYCLE_MESSAGE} (%)', NEW.entity_id USING ERRCODE = '23000';
        END IF;
        IF TG_OP = 'INSERT' OR NEW.evidence::text IS DISTINCT FROM OLD.evidence::text THEN
            doc := NEW.evidence::jsonb;
            IF jsonb_path_exists(
                doc, 'strict $.**{{{MAX_DEPTH}}} ? (@.type() == "object" || @.type() == "array")'
            ) THEN
                RAISE EXCEPTION '{DEPTH_MESSAGE} (%)', NEW.entity_id USING ERRCODE = '23000';
            END IF;
            IF jsonb_path_exists(
                doc,
                'strict $.** ? (@.type() == "number" && '
                '(@ >= {FLOAT_OVERFLOW} || @ <= -{FLOAT_OVERFLOW}))'
            ) THEN
                RAISE EXCEPTION '{NUMBER_MESSAGE} (%)', NEW.entity_id USING ERRCODE = '23000';
            END IF;
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER lessons_restorable BEFORE INSERT OR UPDATE ON lessons
    FOR EACH ROW EXECUTE FUNCTION contextstore_lessons_restorable()
    """,
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lessons_restorable ON lessons",
    "DROP FUNCTION IF EXISTS contextstore_lessons_restorable()",
]

# -- SQLite -------------------------------------------------------------------------------------

# Depth: containers walked from the root by parent id (json_tree's own tree). Only evidence
# with more brackets than the bound can be too deep, so most rows never walk.
_SQLITE_DEPTH = f"""
    (length(NEW.evidence) - length(replace(replace(NEW.evidence, '[', ''), '{{', ''))
        > {MAX_DEPTH}
     AND (WITH RECURSIVE
         nodes(id, parent) AS MATERIALIZED (
             SELECT id, parent FROM json_tree(NEW.evidence) WHERE type IN ('object', 'array')
         ),
         walk(id, depth) AS (
             SELECT id, 1 FROM nodes WHERE parent IS NULL
             UNION ALL
             SELECT n.id, w.depth + 1 FROM nodes n JOIN walk w ON n.parent = w.id
             WHERE w.depth <= {MAX_DEPTH}
         )
         SELECT max(depth) FROM walk) > {MAX_DEPTH})
"""
# SQLite reads 1e400 as infinity and NaN (where accepted) as NULL.
_SQLITE_NUMBER = """
    EXISTS (SELECT 1 FROM json_tree(NEW.evidence)
            WHERE type = 'real' AND (atom IS NULL OR abs(atom) > 1.7976931348623157e308))
"""
_SQLITE_CYCLE = """
    NEW.superseded_by IS NOT NULL AND EXISTS (
        WITH RECURSIVE chain(id) AS (
            SELECT NEW.superseded_by
            UNION
            SELECT l.superseded_by FROM chain c JOIN lessons l ON l.entity_id = c.id
            WHERE l.superseded_by IS NOT NULL
        )
        SELECT 1 FROM chain WHERE id = NEW.entity_id
    )
"""
# With foreign keys on, SQLite checks references itself, at the end of the statement (so one
# statement may delete a lesson and the lessons it supersedes); these cover the sqlite3
# shell, where they are off.
_SQLITE_FOREIGN_KEYS_OFF = "(SELECT foreign_keys FROM pragma_foreign_keys) = 0"
_SQLITE_MISSING = f"""
    {_SQLITE_FOREIGN_KEYS_OFF} AND NEW.superseded_by IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.superseded_by)
"""
_SQLITE_SPACES = f"char({', '.join(str(code) for code in SPACES)})"
_SQLITE_TEXT_CHECKS = "".join(
    f"""
        SELECT RAISE(ABORT, 'lessons.{column} holds a NUL character')
        WHERE instr(CAST(NEW.{column} AS BLOB), x'00') > 0;"""
    for column in TEXT_COLUMNS
) + "".join(
    f"""
        SELECT RAISE(ABORT, 'lessons.{column} has white space at an end')
        WHERE NEW.{column} <> trim(NEW.{column}, {_SQLITE_SPACES});
        SELECT RAISE(ABORT, 'lessons.{column} is longer than 255 characters')
        WHERE length(NEW.{column}) > 255;"""
    for column in ("entity_id", "superseded_by")
)
_SQLITE_CHECKS = (
    _SQLITE_TEXT_CHECKS
    + f"""
        SELECT RAISE(ABORT, '{MISSING_MESSAGE}') WHERE {_SQLITE_MISSING};
        SELECT RAISE(ABORT, '{CYCLE_MESSAGE}') WHERE {_SQLITE_CYCLE};
        SELECT RAISE(ABORT, '{DEPTH_MESSAGE}')
        WHERE json_valid(NEW.evidence) AND {_SQLITE_DEPTH};
        SELECT RAISE(ABORT, '{NUMBER_MESSAGE}')
        WHERE json_valid(NEW.evidence) AND {_SQLITE_NUMBER};
"""
)

SQLITE_UPGRADE = [
    f"""
    CREATE TRIGGER lessons_restorable_insert BEFORE INSERT ON lessons
    FOR EACH ROW
    BEGIN
        {_SQLITE_CHECKS}
    END
    """,
    f"""
    CREATE TRIGGER lessons_restorable_update
    BEFORE UPDATE OF superseded_by, evidence, summary, detail, injection_form ON lessons
    FOR EACH ROW
    BEGIN
        {_SQLITE_CHECKS}
    END
    """,
    f"""
    CREATE TRIGGER lessons_restorable_delete BEFORE DELETE ON lessons
    FOR EACH ROW WHEN {_SQLITE_FOREIGN_KEYS_OFF}
        AND EXISTS (SELECT 1 FROM lessons WHERE superseded_by = OLD.entity_id)
    BEGIN
        SELECT RAISE(ABORT, '{REFERENCED_MESSAGE}');
    END
    """,
    """
    CREATE TRIGGER lessons_scopes_follow AFTER DELETE ON lessons
    FOR EACH ROW
    BEGIN
        DELETE FROM lesson_scopes WHERE lesson_id = OLD.entity_id;
    END
    """,
    f"""
    CREATE TRIGGER lesson_scopes_need_lesson BEFORE INSERT ON lesson_scopes
    FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.lesson_id)
    BEGIN
        SELECT RAISE(ABORT, '{SCOPE_MESSAGE}');
    END
    """,
    """
    CREATE TRIGGER lesson_scopes_no_nul BEFORE INSERT ON lesson_scopes
    FOR EACH ROW WHEN instr(CAST(NEW.scope_key AS BLOB), x'00') > 0
    BEGIN
        SELECT RAISE(ABORT, 'lesson_scopes.scope_key holds a NUL character');
    END
    """,
    f"""
    CREATE TRIGGER lesson_scopes_need_lesson_update BEFORE UPDATE OF lesson_id ON lesson_scopes
    FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM lessons WHERE entity_id = NEW.lesson_id)
    BEGIN
        SELECT RAISE(ABORT, '{SCOPE_MESSAGE}');
    END
    """,
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS lesson_scopes_need_lesson_update",
    "DROP TRIGGER IF EXISTS lesson_scopes_no_nul",
    "DROP TRIGGER IF EXISTS lesson_scopes_need_lesson",
    "DROP TRIGGER IF EXISTS lessons_scopes_follow",
    "DROP TRIGGER IF EXISTS lessons_restorable_delete",
    "DROP TRIGGER IF EXISTS lessons_restorable_update",
    "DROP TRIGGER IF EXISTS lessons_restorable_insert",
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
