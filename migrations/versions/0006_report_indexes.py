"""Indexes that let the metrics reports walk response times in order instead of sorting them.

Revision ID: 0006_report_indexes
Revises: 0005_traces
Create Date: 2026-12-01

Two indexes on ``query_metrics`` holding every column a report reads or filters on, so the
reports are answered from the indexes alone (an index-only scan on PostgreSQL, a covering
index on SQLite) and never touch the wide rows with their JSON traces:

- ``ix_query_metrics_latency`` (namespace, response_ms, …): a percentile of a namespace's
  runs is the row ``OFFSET k`` along it, an ordered walk with no sort;
- ``ix_query_metrics_complexity_latency`` (namespace, complexity, response_ms, …): the same
  per complexity level, and the per-complexity sums read in group order.

Existing rows are indexed as the revision runs; the downgrade drops both indexes.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_report_indexes"
down_revision: str | Sequence[str] | None = "0005_traces"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of contextstore.sql.models.REPORT_COLUMNS and the two indexes over them.
REPORT_COLUMNS = (
    "recorded_at",
    "intent",
    "worker",
    "cache_hit",
    "guard_passed",
    "context_length",
    "lessons_matched",
    "lessons_included",
)
INDEXES = {
    "ix_query_metrics_latency": ("namespace", "response_ms", "complexity", *REPORT_COLUMNS),
    "ix_query_metrics_complexity_latency": (
        "namespace",
        "complexity",
        "response_ms",
        *REPORT_COLUMNS,
    ),
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "query_metrics", list(columns))


def downgrade() -> None:
    for name in reversed(INDEXES):
        op.drop_index(name, table_name="query_metrics")
