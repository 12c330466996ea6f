"""Run traces on query_metrics: the scope, the lessons matched and included, chunk sources.

Revision ID: 0005_traces
Revises: 0003_audit
Create Date: 2026-12-01

Five JSON array columns (``jsonb`` on PostgreSQL, so reports can unnest them with
``jsonb_array_elements_text``; JSON text on SQLite, unnested with ``json_each``). Rows that
exist when this revision is applied get ``[]`` in each: they still count in every report,
they just name no lesson, scope or source. The downgrade drops the columns and keeps the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005_traces"
down_revision: str | Sequence[str] | None = "0003_audit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A frozen copy of contextstore.backends.sql.models.JsonList.
JSON_LIST = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
COLUMNS = (
    "scope_entity_ids",
    "scope_tags",
    "lessons_matched_ids",
    "lessons_included_ids",
    "chunk_sources",
)


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column(
            "query_metrics",
            sa.Column(name, JSON_LIST, server_default=sa.text("'[]'"), nullable=False),
        )


def downgrade() -> None:
    # SQLite has dropped columns in place since 3.35; none of these is indexed or constrained.
    for name in reversed(COLUMNS):
        op.drop_column("query_metrics", name)
