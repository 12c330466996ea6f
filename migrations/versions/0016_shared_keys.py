"""API keys and the console's signing secret in the database, shared by every service node.

Revision ID: 0016_shared_keys
Revises: 0015_proposals
Create Date: 2026-12-02

``contextstore serve`` without a key file (``CONTEXTSTORE_API_KEYS`` unset) keeps its keys
in ``api_keys`` and the secret that signs console sessions in ``service_secrets``, so any
number of servers on one database agree on both at once (docs/decisions/0074). A key row
holds what a key file entry holds: id, namespace, role, salt and salted hash, never the key.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_shared_keys"
down_revision: str | Sequence[str] | None = "0015_proposals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(12), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("label", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_table(
        "service_secrets",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_service_secrets"),
    )


def downgrade() -> None:
    op.drop_table("service_secrets")
    op.drop_table("api_keys")
