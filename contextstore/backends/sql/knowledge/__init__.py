"""The knowledge base in SQL: ``KnowledgeBase`` (``repository``)."""

from __future__ import annotations

from contextstore.backends.sql.knowledge.repository import (
    DEFAULT_CANDIDATE_LIMIT,
    ImportSummary,
    KnowledgeBase,
    Progress,
)

__all__ = ["DEFAULT_CANDIDATE_LIMIT", "ImportSummary", "KnowledgeBase", "Progress"]
