"""Tables: lessons, lesson_scopes, lesson_events, query_metrics, with their check constraints.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

The SQL below is a frozen copy (not imported from ``contextstore.backends.sql.models``) so this
revision keeps producing the same schema whatever the models become later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# The DDL type of contextstore.backends.sql.types.UTCDateTime (timestamptz; SQLite DATETIME text).
UTCDateTime = sa.DateTime(timezone=True)

INJECTION_FORM_SIZE = {
    "postgresql": "octet_length(injection_form) <= 320",
    "sqlite": "length(CAST(injection_form AS BLOB)) <= 320",
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "lessons",
        sa.Column("entity_id", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), server_default=sa.text("'proposed'"), nullable=False),
        sa.Column("severity", sa.String(16), server_default=sa.text("'info'"), nullable=False),
        sa.Column(
            "created_at", UTCDateTime, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.Column(
            "updated_at", UTCDateTime, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.Column("summary", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("detail", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("injection_form", sa.Text(), nullable=False),
        sa.Column("superseded_by", sa.String(255), nullable=True),
        sa.Column("evidence", sa.JSON(), server_default=sa.text("'{}'"), nullable=False),
        sa.PrimaryKeyConstraint("entity_id", name="pk_lessons"),
        sa.ForeignKeyConstraint(
            ["superseded_by"], ["lessons.entity_id"], name="fk_lessons_superseded_by_lessons"
        ),
        sa.CheckConstraint(
            "status IN ('proposed', 'active', 'retired', 'superseded')", name="ck_lessons_status"
        ),
        sa.CheckConstraint(
            "severity IN ('critical', 'warning', 'info')", name="ck_lessons_severity"
        ),
        sa.CheckConstraint(
            "entity_id <> '' AND substr(entity_id, 1, 1) <> '.' "
            "AND substr(entity_id, length(entity_id), 1) <> '.' AND entity_id NOT LIKE '%..%'",
            name="ck_lessons_entity_id",
        ),
        sa.CheckConstraint(
            "(status = 'superseded' AND superseded_by IS NOT NULL "
            "AND superseded_by <> entity_id) "
            "OR (status <> 'superseded' AND superseded_by IS NULL)",
            name="ck_lessons_superseded_by",
        ),
        sa.CheckConstraint(INJECTION_FORM_SIZE[dialect], name="ck_lessons_injection_form_size"),
    )
    op.create_index("ix_lessons_status", "lessons", ["status"])
    op.create_index("ix_lessons_superseded_by", "lessons", ["superseded_by"])

    op.create_table(
        "lesson_scopes",
        sa.Column("lesson_id", sa.String(255), nullable=False),
        sa.Column("scope_key", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("lesson_id", "scope_key", name="pk_lesson_scopes"),
        sa.ForeignKeyConstraint(
            ["lesson_id"],
            ["lessons.entity_id"],
            name="fk_lesson_scopes_lesson_id_lessons",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "(substr(scope_key, 1, 4) = 'tag:' AND length(scope_key) > 4) "
            "OR (substr(scope_key, 1, 3) = 'id:' AND length(scope_key) > 3)",
            name="ck_lesson_scopes_scope_key",
        ),
    )
    op.create_index("ix_lesson_scopes_scope_key", "lesson_scopes", ["scope_key", "lesson_id"])

    op.create_table(
        "lesson_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("lesson_id", sa.String(255), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("old_status", sa.String(16), nullable=True),
        sa.Column("new_status", sa.String(16), nullable=True),
        sa.Column(
            "occurred_at", UTCDateTime, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_lesson_events"),
    )
    op.create_index("ix_lesson_events_lesson_id", "lesson_events", ["lesson_id", "id"])

    op.create_table(
        "query_metrics",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("worker", sa.String(128), nullable=False),
        sa.Column("query_hash", sa.String(32), nullable=False),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("complexity", sa.String(16), nullable=False),
        sa.Column("intent", sa.String(16), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("lessons_matched", sa.Integer(), nullable=False),
        sa.Column("lessons_included", sa.Integer(), nullable=False),
        sa.Column("response_ms", sa.Float(), nullable=False),
        sa.Column("guard_passed", sa.Boolean(), nullable=False),
        sa.Column("guard_warnings", sa.JSON(), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_query_metrics"),
    )
    op.create_index(
        "ix_query_metrics_namespace_recorded_at", "query_metrics", ["namespace", "recorded_at"]
    )
    op.create_index("ix_query_metrics_recorded_at", "query_metrics", ["recorded_at"])


def downgrade() -> None:
    op.drop_table("query_metrics")
    op.drop_table("lesson_events")
    op.drop_table("lesson_scopes")
    op.drop_table("lessons")
