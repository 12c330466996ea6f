"""SQLite: response times in order within each UTC day, for a series' day buckets.

Revision ID: 0008_day_latency_index
Revises: 0007_search_index
Create Date: 2026-12-01

A series by day (the console's chart over a month or everything) needs each day's
percentiles. Without an index in that order SQLite sorts every day's rows — about a second
over a million rows, more than the rest of the page together. ``ix_query_metrics_day_latency``
(namespace, the day of ``recorded_at``, response_ms, …) holds each day's response times in
order with every column a report reads, so a day's percentile is the row ``OFFSET k`` along
it, as the report's are along ``ix_query_metrics_latency``. SQLite keeps an instant as text
``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, so the day is its first ten characters. PostgreSQL
needs nothing: it sorts each bucket in memory, in parallel (see
``contextstore.backends.sql.metrics.postgresql.lateral_series``). Existing rows are indexed as the
revision runs. On a database that has planner statistics (``sqlite_stat1``, made by an
``ANALYZE``) the new index is analyzed too: an index without them looks to SQLite's planner
as if it picked out a few rows, and it would sort a whole namespace along it rather than
walk the latency indexes. A database never analyzed keeps having no statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_day_latency_index"
down_revision: str | Sequence[str] | None = "0007_search_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of contextstore.backends.sql.metrics.sqlite._day_of's expression.
COLUMNS = (
    "namespace",
    "substr(recorded_at, 1, 10)",
    "response_ms",
    "recorded_at",
    "complexity",
    "intent",
    "worker",
    "cache_hit",
    "guard_passed",
    "context_length",
    "lessons_matched",
    "lessons_included",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(f"CREATE INDEX ix_query_metrics_day_latency ON query_metrics ({', '.join(COLUMNS)})")
    analyzed = op.get_bind().exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
    )
    if analyzed.first() is not None:
        op.execute("ANALYZE ix_query_metrics_day_latency")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP INDEX ix_query_metrics_day_latency")
