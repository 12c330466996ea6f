"""The knowledge strategy of each database, chosen once per engine or connection."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.knowledge.postgresql import PostgreSQLKnowledge
from contextstore.backends.sql.knowledge.sqlite import SQLiteKnowledge
from contextstore.backends.sql.knowledge.strategy import KnowledgeStrategy

__all__ = ["STRATEGIES", "strategy_of"]

STRATEGIES: Final[dict[str, KnowledgeStrategy]] = {
    "sqlite": SQLiteKnowledge(),
    "postgresql": PostgreSQLKnowledge(),
}


def strategy_of(bind: sa.Engine | sa.Connection | sa.Dialect | str) -> KnowledgeStrategy:
    """The knowledge strategy of ``bind``'s dialect (``dialect_of``: an unsupported one is
    a ``ConfigurationError``)."""
    return STRATEGIES[dialect_of(bind).name]
