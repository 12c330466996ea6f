"""What a ``KnowledgeBase`` knows of its namespace's analyzer and embedder.

``ConfiguredKnowledge`` is the part of ``KnowledgeBase`` that reads and changes the settings
``knowledge_settings`` stores (docs/decisions/0085-namespace-analyzer-and-embedder-in-sql.md):
the properties say what the knowledge base analyses and embeds with, ``settings`` reads the
row, ``configure`` reindexes (``knowledge.reindex``), and ``_stale`` tells a search planned
for other settings than its index's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from contextstore.backends.sql.database import translate_errors
from contextstore.backends.sql.knowledge.queries import SearchPlan
from contextstore.backends.sql.knowledge.settings import (
    UNCHANGED,
    Active,
    Configuration,
    Unchanged,
    read_settings,
    settings_version_column,
)
from contextstore.core.analyzers import Analyzer
from contextstore.core.embedding import EmbedFn

if TYPE_CHECKING:
    from contextstore.backends.sql.knowledge.reindex import ConfigureSummary

__all__ = ["ConfiguredKnowledge"]

T = TypeVar("T")


class ConfiguredKnowledge:
    """The settings half of ``KnowledgeBase`` (which provides the attributes below)."""

    namespace: str
    _engine: sa.Engine
    _autocommit: sa.Engine
    _configuration: Configuration

    def _read(self, work: Callable[[sa.Connection], T]) -> T:
        raise NotImplementedError  # ``KnowledgeBase._read``

    @property
    def embed_fn(self) -> EmbedFn | None:
        """The embedder this knowledge base embeds with (the namespace's, once read)."""
        return self._active().embed_fn

    @property
    def embedder(self) -> str | None:
        """The name each chunk's ``embedder`` column records for ``embed_fn``."""
        return self._active().embedder

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer documents and queries go through (the namespace's, once read)."""
        return self._active().analyzer

    def _active(self) -> Active:
        # The last settings read, without I/O (``plan`` may run where no I/O may); before
        # the first read, the process's own, checked against the row by the first search.
        return self._configuration.active or self._configuration.resolve(None)

    def settings(self) -> Active:
        """Read the namespace's stored settings and resolve them (one primary-key read).

        Raises ``ValidationError`` naming ``analyzer`` or ``embedder`` when this process
        asked for something else than the namespace is configured with.
        """
        stored = self._read(partial(read_settings, namespace=self.namespace))
        return self._configuration.resolve(stored)

    def configure(
        self,
        analyzer: str | None = None,
        embedder: str | Unchanged | None = UNCHANGED,
        *,
        progress: Callable[[int], None] | None = None,
        total: Callable[[int], None] | None = None,
    ) -> ConfigureSummary:
        """Store the namespace's ``analyzer`` and ``embedder`` and reindex what they change
        (``contextstore.backends.sql.knowledge.reindex.configure``); searches answer from the
        old index until the new one is complete. ``None`` for ``analyzer`` keeps it;
        ``embedder=None`` (or ``"none"``) means lexical only, and leaving it out keeps it.
        """
        from contextstore.backends.sql.knowledge.reindex import configure
        from contextstore.backends.sql.knowledge.repository import KnowledgeBase

        assert isinstance(self, KnowledgeBase)
        return configure(self, analyzer, embedder, progress=progress, total=total)

    def _stale(self, plan: SearchPlan, rows: Sequence[Any]) -> bool:
        if rows:
            return plan.stale(rows)
        # No row carries the version: one primary-key read tells whether the query was
        # analysed for the index that answered.
        statement = sa.select(settings_version_column(sa.bindparam("ns", self.namespace)))
        with translate_errors(self._engine.url), self._autocommit.connect() as c:
            version = c.execute(statement).scalar()
        return int(version or 0) != plan.settings_version
