"""Each run's lessons as rows, kept by triggers; each worker's response times in order.

Revision ID: 0009_run_lessons
Revises: 0008_day_latency_index
Create Date: 2026-12-01

A report by lesson and the lesson statistics read the lesson ids inside each run's JSON
arrays (``lessons_matched_ids``, ``lessons_included_ids``), which no index holds: every
selected run's arrays were unnested and the result sorted, seconds over a million runs.

``query_metric_lessons`` holds one row per (run, lesson id the run's arrays name), flagged
``matched`` and ``included``, with copies of the run's columns a report reads; its index
``ix_query_metric_lessons_latency`` (namespace, lesson_id, included, response_ms, …) holds a
lesson's runs in response-time order, so a lesson's percentile is the entry ``OFFSET k``
along it, as the overall ones are along ``ix_query_metrics_latency``.

Triggers on ``query_metrics`` keep it, whoever writes the runs (the engine's one-statement
write, ``record_many``, imports, ``metrics prune``, SQL typed by hand):

- an insert adds the run's lesson rows; an update of the arrays or a copied column
  (or ``id``) rewrites them; a delete removes them (PostgreSQL: TRUNCATE too);
- only string elements of an array name a lesson; an array that is not an array (SQLite:
  not text, not valid JSON, not an array; PostgreSQL: a ``jsonb`` that is not an array)
  names none, so a row typed by hand is never refused for its arrays;
- a lesson named twice by one run is one row: the run counts once for that lesson.

PostgreSQL's delete trigger runs once per statement over its transition table (a prune of a
million rows is one set-based DELETE); its insert and update triggers run per row, the update
one only when one of those columns is set: on the engine's one-row write a row trigger
measured about half the cost of a statement trigger over a transition table. SQLite's
triggers run per row, and its insert trigger first removes lesson rows left under the new
row's id (``INSERT OR REPLACE`` deletes the row it replaces without firing delete
triggers). Existing runs are copied as the revision runs.

``ix_query_metrics_worker_latency`` (namespace, worker, response_ms, …) holds each worker's
response times in order: a report by worker walks each worker's own entries, however many
workers, instead of sorting every run.

Planner statistics: PostgreSQL's new table is analyzed; on SQLite, as in 0008, the new
table and index are analyzed only on a database that has statistics (``sqlite_stat1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_run_lessons"
down_revision: str | Sequence[str] | None = "0008_day_latency_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of contextstore.backends.sql.models.REPORT_COLUMNS and RUN_LESSON_COPIES.
REPORT_COLUMNS = (
    "intent",
    "worker",
    "cache_hit",
    "guard_passed",
    "context_length",
    "lessons_matched",
    "lessons_included",
)
COPIES = ("namespace", "recorded_at", "response_ms", "complexity", *REPORT_COLUMNS)
# Frozen copies of the column types (backends.sql.models, backends.sql.types).
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)
TABLE = "query_metric_lessons"
INDEX = (
    "ix_query_metric_lessons_latency",
    (
        "namespace",
        "lesson_id",
        "included",
        "response_ms",
        "matched",
        "recorded_at",
        "complexity",
        *REPORT_COLUMNS,
    ),
)
WORKER_INDEX = (
    "ix_query_metrics_worker_latency",
    (
        "namespace",
        "worker",
        "response_ms",
        "recorded_at",
        "complexity",
        *(column for column in REPORT_COLUMNS if column != "worker"),
    ),
)
# The columns whose change rewrites a run's lesson rows.
WATCHED = ("id", "lessons_matched_ids", "lessons_included_ids", *COPIES)
TARGET = f"{TABLE} (metric_id, lesson_id, matched, included, {', '.join(COPIES)})"


def _sqlite_rows(source: str) -> str:
    """SQLite: the lesson rows of the runs in ``source`` (aliased ``q``), one per lesson.

    ``CASE`` tries each test in turn, so ``json_each`` only ever sees a valid JSON array.
    """

    def named(column: str, matched: int) -> str:
        array = (
            f"CASE WHEN typeof(q.{column}) <> 'text' THEN '[]' "
            f"WHEN NOT json_valid(q.{column}) THEN '[]' "
            f"WHEN json_type(q.{column}) <> 'array' THEN '[]' ELSE q.{column} END"
        )
        copies = ", ".join(f"q.{column} AS {column}" for column in COPIES)
        return (
            f"SELECT q.id AS metric_id, e.value AS lesson_id, {matched} AS matched, "
            f"{1 - matched} AS included, {copies} "
            f"FROM {source} AS q, json_each({array}) AS e WHERE e.type = 'text'"
        )

    # The copies are the same on every row of a group (one run's): SQLite takes them as is.
    return (
        f"SELECT metric_id, lesson_id, max(matched), max(included), {', '.join(COPIES)} "
        f"FROM ({named('lessons_matched_ids', 1)} UNION ALL "
        f"{named('lessons_included_ids', 0)}) GROUP BY metric_id, lesson_id"
    )


_SQLITE_NEW = "(SELECT {}) ".format(
    ", ".join(
        f"NEW.{column} AS {column}"
        for column in ("id", "lessons_matched_ids", "lessons_included_ids", *COPIES)
    )
)

SQLITE_UPGRADE = [
    f"""
    CREATE TRIGGER query_metrics_lessons_insert AFTER INSERT ON query_metrics
    BEGIN
        DELETE FROM {TABLE} WHERE metric_id = NEW.id;
        INSERT INTO {TARGET} {_sqlite_rows(_SQLITE_NEW)};
    END
    """,
    f"""
    CREATE TRIGGER query_metrics_lessons_update AFTER UPDATE OF {", ".join(WATCHED)}
    ON query_metrics
    BEGIN
        DELETE FROM {TABLE} WHERE metric_id = OLD.id;
        DELETE FROM {TABLE} WHERE metric_id = NEW.id;
        INSERT INTO {TARGET} {_sqlite_rows(_SQLITE_NEW)};
    END
    """,
    f"""
    CREATE TRIGGER query_metrics_lessons_delete AFTER DELETE ON query_metrics
    BEGIN
        DELETE FROM {TABLE} WHERE metric_id = OLD.id;
    END
    """,
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER query_metrics_lessons_delete",
    "DROP TRIGGER query_metrics_lessons_update",
    "DROP TRIGGER query_metrics_lessons_insert",
]


def _postgres_rows(source: str) -> str:
    """PostgreSQL: the lesson rows of the runs in ``source`` (aliased ``q``), one per lesson."""

    def named(column: str, matched: str) -> str:
        array = f"CASE jsonb_typeof(q.{column}) WHEN 'array' THEN q.{column} ELSE '[]'::jsonb END"
        return f"SELECT value, {matched} AS matched FROM jsonb_array_elements({array})"

    copies = ", ".join(f"q.{column}" for column in COPIES)
    return (
        f"SELECT q.id, n.lesson_id, n.matched, n.included, {copies} FROM {source} AS q "
        "CROSS JOIN LATERAL (SELECT e.value #>> '{}' AS lesson_id, "
        "bool_or(e.matched) AS matched, bool_or(NOT e.matched) AS included "
        f"FROM ({named('lessons_matched_ids', 'true')} UNION ALL "
        f"{named('lessons_included_ids', 'false')}) AS e "
        "WHERE jsonb_typeof(e.value) = 'string' GROUP BY 1) AS n"
    )


# ``SET search_path FROM CURRENT`` pins the schema the tables were migrated into (see 0002).
POSTGRES_UPGRADE = [
    f"""
    CREATE FUNCTION contextstore_query_metric_lessons() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'TRUNCATE' THEN
            TRUNCATE {TABLE};
        ELSE
            DELETE FROM {TABLE} WHERE metric_id IN (SELECT id FROM old_rows);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    f"""
    CREATE FUNCTION contextstore_query_metric_lessons_write() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            DELETE FROM {TABLE} WHERE metric_id IN (OLD.id, NEW.id);
        END IF;
        INSERT INTO {TARGET} {_postgres_rows("(SELECT NEW.*)")};
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER query_metrics_lessons_insert AFTER INSERT ON query_metrics
    FOR EACH ROW EXECUTE FUNCTION contextstore_query_metric_lessons_write()
    """,
    """
    CREATE TRIGGER query_metrics_lessons_delete AFTER DELETE ON query_metrics
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_query_metric_lessons()
    """,
    """
    CREATE TRIGGER query_metrics_lessons_truncate AFTER TRUNCATE ON query_metrics
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_query_metric_lessons()
    """,
    f"""
    CREATE TRIGGER query_metrics_lessons_update AFTER UPDATE OF {", ".join(WATCHED)}
    ON query_metrics
    FOR EACH ROW EXECUTE FUNCTION contextstore_query_metric_lessons_write()
    """,
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER query_metrics_lessons_update ON query_metrics",
    "DROP TRIGGER query_metrics_lessons_truncate ON query_metrics",
    "DROP TRIGGER query_metrics_lessons_delete ON query_metrics",
    "DROP TRIGGER query_metrics_lessons_insert ON query_metrics",
    "DROP FUNCTION contextstore_query_metric_lessons_write()",
    "DROP FUNCTION contextstore_query_metric_lessons()",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        TABLE,
        sa.Column("metric_id", BIG_ID, nullable=False),
        sa.Column("lesson_id", sa.Text(), nullable=False),
        sa.Column("matched", sa.Boolean(), nullable=False),
        sa.Column("included", sa.Boolean(), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("recorded_at", UTC_DATETIME, nullable=False),
        sa.Column("response_ms", sa.Float(), nullable=False),
        sa.Column("complexity", sa.String(16), nullable=False),
        sa.Column("intent", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(128), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("guard_passed", sa.Boolean(), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=False),
        sa.Column("lessons_matched", sa.Integer(), nullable=False),
        sa.Column("lessons_included", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("metric_id", "lesson_id", name=f"pk_{TABLE}"),
    )
    if dialect == "postgresql":
        op.execute(f"INSERT INTO {TARGET} {_postgres_rows('query_metrics')}")
    else:
        op.execute(f"INSERT INTO {TARGET} {_sqlite_rows('query_metrics')}")
    op.create_index(INDEX[0], TABLE, list(INDEX[1]))
    op.create_index(WORKER_INDEX[0], "query_metrics", list(WORKER_INDEX[1]))
    for statement in POSTGRES_UPGRADE if dialect == "postgresql" else SQLITE_UPGRADE:
        op.execute(statement)
    if dialect == "postgresql":
        op.execute(f"ANALYZE {TABLE}")
        return
    analyzed = op.get_bind().exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
    )
    if analyzed.first() is not None:
        op.execute(f"ANALYZE {TABLE}")
        op.execute(f"ANALYZE {WORKER_INDEX[0]}")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_DOWNGRADE if dialect == "postgresql" else SQLITE_DOWNGRADE:
        op.execute(statement)
    op.drop_index(WORKER_INDEX[0], table_name="query_metrics")
    op.drop_index(INDEX[0], table_name=TABLE)
    op.drop_table(TABLE)
