"""PostgreSQL: autovacuum the metrics tables after each 1% of new rows, not 20%.

Revision ID: 0010_metrics_autovacuum
Revises: 0009_run_lessons
Create Date: 2026-12-01

A report walks its percentiles along the latency indexes only while PostgreSQL's visibility
map marks most of the table all-visible (``contextstore.backends.sql.metrics.queries.walks_pay``):
otherwise each step of a walk reads a row's page at random, and the report sorts instead,
several times slower over a million runs. VACUUM sets those marks. By default autovacuum
vacuums a table that only grows once its new rows reach 20% of it, so a metrics table of a
million runs would carry up to 200,000 unmarked rows, often more than the 10% the walks
allow. ``query_metrics`` and ``query_metric_lessons`` only grow (and are pruned), so a
vacuum of them reads little more than the pages written since the last one: this revision
sets their ``autovacuum_vacuum_insert_scale_factor`` to 1%, and ``..._threshold`` stays at
its 1,000 rows. An administrator may set other values with ``ALTER TABLE … SET``; the
downgrade resets both tables to the server's defaults. SQLite has no such thing.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010_metrics_autovacuum"
down_revision: str | Sequence[str] | None = "0009_run_lessons"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("query_metrics", "query_metric_lessons")
INSERT_SCALE_FACTOR = 0.01


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(
            f"ALTER TABLE {table} SET (autovacuum_vacuum_insert_scale_factor = "
            f"{INSERT_SCALE_FACTOR})"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_insert_scale_factor)")
