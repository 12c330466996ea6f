"""Indexes that answer the metrics reports without reading the rows or sorting them.

Revision ID: 0006_report_indexes
Revises: 0005_traces
Create Date: 2026-12-01

Three indexes on ``query_metrics`` holding every column a report reads or filters on, so a
report is answered from an index alone (an index-only scan on PostgreSQL, a covering index
on SQLite) and never reads the wide rows with their JSON traces:

- ``ix_query_metrics_time`` (namespace, recorded_at, …) replaces
  ``ix_query_metrics_namespace_recorded_at``: a namespace's time range, a series' buckets;
- ``ix_query_metrics_latency`` (namespace, response_ms, …): a percentile of a namespace's
  runs is the row ``OFFSET k`` along it, an ordered walk with no sort;
- ``ix_query_metrics_complexity_latency`` (namespace, complexity, response_ms, …): the
  same per complexity level, and the per-complexity sums read in group order.

Existing rows are indexed as the revision runs; the downgrade restores the original index.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_report_indexes"
down_revision: str | Sequence[str] | None = "0005_traces"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of contextstore.backends.sql.models.REPORT_COLUMNS and the indexes over them.
REPORT_COLUMNS = (
    "intent",
    "worker",
    "cache_hit",
    "guard_passed",
    "context_length",
    "lessons_matched",
    "lessons_included",
)
INDEXES = {
    "ix_query_metrics_time": ("namespace", "recorded_at", "response_ms", "complexity"),
    "ix_query_metrics_latency": ("namespace", "response_ms", "recorded_at", "complexity"),
    "ix_query_metrics_complexity_latency": (
        "namespace",
        "complexity",
        "response_ms",
        "recorded_at",
    ),
}
REPLACED = ("ix_query_metrics_namespace_recorded_at", ("namespace", "recorded_at"))


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "query_metrics", [*columns, *REPORT_COLUMNS])
    op.drop_index(REPLACED[0], table_name="query_metrics")


def downgrade() -> None:
    op.create_index(REPLACED[0], "query_metrics", list(REPLACED[1]))
    for name in reversed(INDEXES):
        op.drop_index(name, table_name="query_metrics")
