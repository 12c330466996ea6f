"""The knowledge base in SQL: ``KnowledgeBase`` (``repository``: the constructor, writes and
transactions), searching (``search``), reading documents (``reads``), the search statement
(``queries``), metadata filters (``filters``), the process-local lexical index (``index``)
and its top-k (``topk``), vector candidates (``vectors``), the namespace's analyzer and
embedder (``settings``, ``config``) and the reindex that switches them (``reindex``). What
differs between SQLite and PostgreSQL is one ``KnowledgeStrategy`` per database
(``strategy``, ``sqlite``, ``postgresql``), chosen by ``strategies.strategy_of``; the tables
are in ``tables``.

The names callers import from ``contextstore.backends.sql.knowledge`` stay here.
"""

from __future__ import annotations

from contextstore.backends.sql.knowledge.repository import (
    DEFAULT_CANDIDATE_LIMIT,
    ImportSummary,
    KnowledgeBase,
    Progress,
)

__all__ = ["DEFAULT_CANDIDATE_LIMIT", "ImportSummary", "KnowledgeBase", "Progress"]
