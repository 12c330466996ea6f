"""PostgreSQL: the chunks' GIN index without a pending list (``fastupdate = off``).

Revision ID: 0007_search_index
Revises: 0006_report_indexes
Create Date: 2026-12-01

With ``fastupdate`` on (PostgreSQL's default) new index entries go to a pending list that
every search reads in full, linearly, until a VACUUM (or the list's 4 MB limit) merges it
into the index: after an import a search read some 430 pending pages for 80 matches. Off,
every write updates the index itself, so a search reads only the posting lists of its terms
however recently the corpus changed. The upgrade also merges what is pending now
(``gin_clean_pending_list``). SQLite has no such list: nothing to do there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007_search_index"
down_revision: str | Sequence[str] | None = "0006_report_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER INDEX ix_chunks_search SET (fastupdate = off)")
    op.execute("SELECT gin_clean_pending_list('ix_chunks_search'::regclass)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER INDEX ix_chunks_search RESET (fastupdate)")
