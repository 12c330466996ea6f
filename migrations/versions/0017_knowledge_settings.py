"""Each namespace's analyzer and embedder in the database, so every process agrees on them.

Revision ID: 0017_knowledge_settings
Revises: 0016_shared_keys
Create Date: 2026-12-02

``knowledge_settings`` holds one row per configured namespace: the ``analyzer`` its index
terms were made with, the ``embedder`` its vectors come from (null: lexical only) and their
``dimension``, and a ``version`` that grows with every change. A namespace without a row
uses the process's own configuration (docs/decisions/0085). A reindex rewrites the chunks and
this row in one transaction, so a search sees the old index or the new one, never both.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_knowledge_settings"
down_revision: str | Sequence[str] | None = "0016_shared_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "knowledge_settings",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("analyzer", sa.String(32), nullable=False),
        sa.Column("embedder", sa.String(255), nullable=True),
        sa.Column("dimension", sa.Integer(), nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace", name="pk_knowledge_settings"),
        sa.CheckConstraint(
            "(embedder IS NULL AND dimension IS NULL) OR "
            "(embedder IS NOT NULL AND (dimension IS NULL OR dimension > 0))",
            name="ck_knowledge_settings_dimension",
        ),
    )


def downgrade() -> None:
    op.drop_table("knowledge_settings")
