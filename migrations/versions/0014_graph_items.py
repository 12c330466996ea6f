"""LangGraph's store in SQL: ``graph_namespaces`` and ``graph_items``.

Revision ID: 0014_graph_items
Revises: 0013_audit_from_triggers
Create Date: 2026-12-02

``contextstore.integrations.langgraph.ContextStoreStore`` keeps a LangGraph ``BaseStore``'s
items here, per contextstore namespace, so every process of a fleet shares them. A LangGraph
namespace is one ``graph_namespaces`` row (its labels joined by ``.``; LangGraph refuses a
label holding a period), made with its first item and deleted with its last; each item is a
JSON object under a key, its id giving the order in which the keys of a namespace came.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_graph_items"
down_revision: str | Sequence[str] | None = "0013_audit_from_triggers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "graph_namespaces",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_graph_namespaces"),
        sa.UniqueConstraint("namespace", "path", name="uq_graph_namespaces_namespace_path"),
    )
    op.create_table(
        "graph_items",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("namespace_id", BIG_ID, nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_graph_items"),
        sa.ForeignKeyConstraint(
            ["namespace_id"],
            ["graph_namespaces.id"],
            name="fk_graph_items_namespace_id_graph_namespaces",
        ),
        sa.UniqueConstraint("namespace_id", "key", name="uq_graph_items_namespace_id_key"),
    )


def downgrade() -> None:
    op.drop_table("graph_items")
    op.drop_table("graph_namespaces")
