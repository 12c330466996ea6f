"""The knowledge base's tables, as the models declare them (the migrations make them)."""

from __future__ import annotations

from typing import Final, cast

import sqlalchemy as sa

from contextstore.backends.sql.models import (
    ChunkRow,
    DocumentRow,
    KnowledgeStatsRow,
    KnowledgeTermRow,
)

__all__ = ["CHUNKS", "DOCUMENTS", "STATS", "TERMS"]

DOCUMENTS: Final = cast(sa.Table, DocumentRow.__table__)
CHUNKS: Final = cast(sa.Table, ChunkRow.__table__)
STATS: Final = cast(sa.Table, KnowledgeStatsRow.__table__)
TERMS: Final = cast(sa.Table, KnowledgeTermRow.__table__)
