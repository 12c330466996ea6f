"""The reading half of ``KnowledgeBase``: one document with its passages, or a page of them.

A document typed by hand in SQL that the library cannot read (text that is not UTF-8,
metadata that is not a JSON object, a timestamp that is not one) is named by ``get`` and
skipped by ``list``, never failing the read of the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.knowledge.config import ConfiguredKnowledge
from contextstore.backends.sql.knowledge.queries import read_metadata
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS
from contextstore.backends.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_json,
    check_text,
    printable,
    raw_text,
    read_timestamp,
)
from contextstore.core.knowledge import Document
from contextstore.core.validation import (
    check_count,
    check_optional_count,
    optional_storable_text,
    storable_text,
)
from contextstore.errors import NotFoundError, ValidationError

__all__ = ["DocumentReads", "Documents", "check_source"]

Documents = list[Document]


class DocumentReads(ConfiguredKnowledge):
    """The reading half of ``KnowledgeBase``."""

    def get(self, source: str) -> Document:
        """The document ``source`` with its passages in order; ``NotFoundError`` if none."""
        check_source(source)
        statement = (
            sa.select(*_document_columns(self._engine), CHUNKS.c.text)
            .select_from(DOCUMENTS.outerjoin(CHUNKS, CHUNKS.c.document_id == DOCUMENTS.c.id))
            .where(DOCUMENTS.c.namespace == self.namespace, DOCUMENTS.c.source == source)
            .order_by(CHUNKS.c.position)
        )
        rows = self._read(lambda c: c.execute(statement).all())
        if not rows:
            raise NotFoundError(f"no document {source!r} in namespace {self.namespace!r}")
        try:
            passages = tuple(check_text("text", row[-1]) for row in rows if row[-1] is not None)
            return _document(rows[0][:-1], len(passages), passages)
        except UnreadableRowError as error:
            raise ValidationError(
                error.column, f"document {source!r} is stored with an unreadable {error}"
            ) from error

    def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> Documents:
        """Documents ordered by source (code point order), without their passages.

        ``prefix`` keeps sources starting with it (case-sensitively); ``limit`` of ``None``
        means all. A negative ``limit`` or ``offset`` is refused.
        """
        check_optional_count(limit, "limit")
        check_count(offset, "offset")
        optional_storable_text(prefix, "prefix")
        counts = (
            sa.select(CHUNKS.c.document_id, sa.func.count().label("n"))
            .where(CHUNKS.c.namespace == self.namespace)
            .group_by(CHUNKS.c.document_id)
            .subquery()
        )
        statement = (
            sa.select(*_document_columns(self._engine), sa.func.coalesce(counts.c.n, 0))
            .select_from(DOCUMENTS.outerjoin(counts, counts.c.document_id == DOCUMENTS.c.id))
            .where(DOCUMENTS.c.namespace == self.namespace)
            .order_by(dialect_of(self._engine).by_code_point(DOCUMENTS.c.source))
            .limit(limit)
            .offset(offset)
        )
        if prefix:
            statement = statement.where(
                sa.func.substr(DOCUMENTS.c.source, 1, len(prefix)) == prefix
            )
        rows = self._read(lambda c: c.execute(statement).all())
        documents: Documents = []
        for row in rows:
            try:
                documents.append(_document(row[:-1], int(row[-1])))
            except UnreadableRowError as error:
                DOCUMENT_WARNINGS.skipped(printable(row[0]), error)
        return documents


def check_source(source: object) -> None:
    """Refuse (``ValidationError``) a source that could not be stored."""
    storable_text(source, "source")


def _document_columns(engine: sa.Engine) -> tuple[sa.ColumnElement[Any], ...]:
    """The documents' columns, metadata and timestamps fetched in a form the driver cannot
    fail on: a row typed by hand in SQL is then skipped (or named) by ``_document``, instead
    of failing the statement and every other document with it."""
    d = DOCUMENTS.c
    dialect = dialect_of(engine)
    return (
        d.source,
        strategy_of(engine).fetched_json(d["metadata"]),
        d.content_hash,
        dialect.safe_timestamp(d.created_at),
        dialect.safe_timestamp(d.updated_at),
        raw_text(d.created_at),
        raw_text(d.updated_at),
    )


def _document(row: Sequence[Any], chunk_count: int, passages: tuple[str, ...] = ()) -> Document:
    """A ``_document_columns`` row as a ``Document``; ``UnreadableRowError`` when a column
    holds what the library cannot read (bytes that are not UTF-8, metadata that is not a JSON
    object, a timestamp that is not one)."""
    source, metadata, digest, created_at, updated_at, created_raw, updated_raw = row
    return Document(
        source=check_text("source", source),
        metadata=check_json("metadata", read_metadata(metadata)),
        content_hash=digest,
        chunk_count=chunk_count,
        created_at=read_timestamp("created_at", created_at, created_raw),
        updated_at=read_timestamp("updated_at", updated_at, updated_raw),
        passages=passages,
    )
