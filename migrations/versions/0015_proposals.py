"""Lessons proposed by agents: ``lesson_proposals`` and ``proposal_limits``.

Revision ID: 0015_proposals
Revises: 0014_graph_items
Create Date: 2026-12-02

A proposed lesson is an ordinary ``lessons`` row with status ``proposed`` (the status, its
lifecycle and the audit already exist); ``lesson_proposals`` adds what the row does not
hold: which namespace proposed it and who (the audit names the proposer too), when, and the
review — who rejected it and why, or who accepted it. ``proposal_limits`` caps a namespace's
proposals per hour; a namespace without a row has no cap.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_proposals"
down_revision: str | Sequence[str] | None = "0014_graph_items"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "lesson_proposals",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("lesson_id", sa.String(255), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("proposer", sa.String(255), nullable=False),
        sa.Column("proposed_at", UTC_DATETIME, nullable=False),
        sa.Column("reviewer", sa.String(255), nullable=True),
        sa.Column("reviewed_at", UTC_DATETIME, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_lesson_proposals"),
    )
    op.create_index(
        "ix_lesson_proposals_namespace_proposed_at",
        "lesson_proposals",
        ["namespace", "proposed_at"],
    )
    op.create_index("ix_lesson_proposals_lesson_id", "lesson_proposals", ["lesson_id", "id"])
    op.create_table(
        "proposal_limits",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("per_hour", sa.Integer(), nullable=False),
        sa.CheckConstraint("per_hour >= 0", name="ck_proposal_limits_per_hour"),
        sa.PrimaryKeyConstraint("namespace", name="pk_proposal_limits"),
    )


def downgrade() -> None:
    op.drop_table("proposal_limits")
    op.drop_index("ix_lesson_proposals_lesson_id", table_name="lesson_proposals")
    op.drop_index("ix_lesson_proposals_namespace_proposed_at", table_name="lesson_proposals")
    op.drop_table("lesson_proposals")
