"""``KnowledgeBase``: the fleet's documents in SQL, searched through the database's full-text index.

Every process of a fleet reads the same corpus: a document one process adds is found by every
other on its next search, without restarting or re-indexing anything. ``search`` ranks with
``contextstore.core.ranking`` — the function ``InMemoryRetriever`` uses — over the namespace's
statistics, which the migrations' triggers keep in ``knowledge_stats`` and
``knowledge_terms``; so whenever a query's matches fit ``candidate_limit``, SQLite,
PostgreSQL and an ``InMemoryRetriever`` holding the same documents return the same chunks in
the same order.

The knowledge base is written in halves by concern: searching (``knowledge.search``, with
the statements in ``knowledge.queries``), reading documents (``knowledge.reads``), the
namespace's settings (``knowledge.config``); this module holds the constructor, the writes
(an import, a delete, a re-embedding) and the transactions. Every public method but a
search is one transaction of its own. Writes validate everything first
(``contextstore.core.knowledge``) and raise ``ValidationError`` naming the field or line
before anything is written; an import is all or nothing. Embeddings are computed once, when
a document is written, with ``embed_fn``; a search embeds only its query.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final, TypeVar

import numpy as np
import sqlalchemy as sa

from contextstore.backends.sql.database import (
    autocommit,
    read_only,
    tolerating_bytes,
    translate_errors,
)
from contextstore.backends.sql.knowledge.index import LocalIndex
from contextstore.backends.sql.knowledge.queries import SearchStatements, lock_namespace_statement
from contextstore.backends.sql.knowledge.reads import DocumentReads, check_source
from contextstore.backends.sql.knowledge.search import KnowledgeSearch
from contextstore.backends.sql.knowledge.settings import (
    Active,
    Configuration,
    build_embedder,
    check_dimension,
    check_embedder,
    read_settings,
)
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.strategy import KnowledgeStrategy
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS
from contextstore.backends.sql.repository import ImportSummary
from contextstore.backends.sql.transactions import retry_locks
from contextstore.core.analyzers import Analyzer, analyzer_named
from contextstore.core.embedding import EmbedFn
from contextstore.core.knowledge import (
    Document,
    DocumentInput,
    Passage,
    embed_passages,
    parse_jsonl,
    prepare_passages,
    validate_document,
)
from contextstore.core.ranking import RankingParameters
from contextstore.core.retrieval import DEFAULT_PASSAGE_CHARS, SearchMode, search_mode
from contextstore.errors import NotFoundError, ValidationError

__all__ = ["BATCH_SIZE", "DEFAULT_CANDIDATE_LIMIT", "ImportSummary", "KnowledgeBase", "Progress"]

# Candidates fetched per search. Enough for every query whose lexical matches matter; the
# full-text rank picks which ones when more match.
DEFAULT_CANDIDATE_LIMIT: Final = 1000
# Documents per insert batch (and per progress report) during an import.
BATCH_SIZE: Final = 500

T = TypeVar("T")
Progress = Callable[[int], None]
Rows = list[dict[str, Any]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KnowledgeBase(KnowledgeSearch, DocumentReads):
    """One namespace's documents; a ``Retriever`` for ``ContextEngine``.

    ``embed_fn`` (for example ``HashingEmbedder()``) turns on fusion with cosine similarity;
    ``analyzer`` (``"simple"``, ``"english"``) and ``embedder`` (a registry name) ask for a
    namespace's configuration: a namespace configured in the database (``configure``) is
    analysed and embedded as stored, and a different request is refused on first use
    (``knowledge.settings``);
    ``keyword_weight``, ``k1``, ``b`` and ``max_passage_chars`` mean what they mean for
    ``InMemoryRetriever``. ``candidate_limit`` (≥ 1) bounds the chunks one search reads in
    SQL. Without an embedder, and unless ``local_index=False``, a search ranks in a
    process-local index of the namespace (``knowledge.index``): exact whatever the number of
    matches. After any write the index is rebuilt in the background (a daemon thread, one
    build at a time, ``knowledge.builds``) and searches are ranked in SQL until it is
    swapped in, exact then while the matches fit ``candidate_limit``, as with
    ``local_index=False``; ``wait_for_index`` waits for it. ``mode`` is the default search
    mode (``hybrid``, ``lexical`` or ``vector``, as in ``InMemoryRetriever``);
    ``exact_vectors`` makes PostgreSQL scan every vector instead of using its HNSW index.
    Thread-safe: every call opens its own connection.
    """

    def __init__(
        self,
        engine: sa.Engine,
        namespace: str = "default",
        *,
        embed_fn: EmbedFn | None = None,
        analyzer: str | Analyzer | None = None,
        embedder: str | None = None,
        candidate_limit: int = DEFAULT_CANDIDATE_LIMIT,
        keyword_weight: float = 0.6,
        k1: float = 1.5,
        b: float = 0.75,
        max_passage_chars: int = DEFAULT_PASSAGE_CHARS,
        mode: SearchMode = "hybrid",
        exact_vectors: bool = False,
        local_index: bool = True,
        clock: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if isinstance(candidate_limit, bool) or not isinstance(candidate_limit, int):
            raise ValidationError("candidate_limit", "must be an integer")
        if candidate_limit < 1:
            raise ValidationError("candidate_limit", f"must be >= 1, got {candidate_limit}")
        if not 0.0 <= keyword_weight <= 1.0:
            raise ValidationError("keyword_weight", f"must be in [0, 1], got {keyword_weight!r}")
        if not 0.0 <= k1 < float("inf"):
            raise ValidationError("k1", f"must be a finite number >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise ValidationError("b", f"must be in [0, 1], got {b!r}")
        if max_passage_chars < 1:
            raise ValidationError("max_passage_chars", f"must be >= 1, got {max_passage_chars}")
        self._engine = engine
        # Derived once: building an options engine per call costs more than the statement.
        self._autocommit = autocommit(engine)
        self._statements = SearchStatements(engine)
        self.namespace = namespace
        self._configuration = Configuration(
            namespace,
            requested_analyzer=None if analyzer is None else analyzer_named(analyzer).name,
            requested_embedder=check_embedder(embedder),
            embed_fn=embed_fn,
            build=build_embedder,
        )
        self.candidate_limit = candidate_limit
        self.mode = search_mode(mode)
        self.exact_vectors = bool(exact_vectors)
        self._vector_backend: str | None = None
        self.parameters = RankingParameters(float(k1), float(b), float(keyword_weight))
        self._max_passage_chars = max_passage_chars
        self._clock = clock
        # How a retry waits out a transient SQLite lock; the async knowledge base passes one
        # that yields to the event loop instead of blocking it.
        self._sleep = sleep
        # Lexical searches rank in a process-local index kept in step with the namespace's
        # generation (``knowledge.index``, decision 0089); fusion with an embedder stays in SQL.
        self.local: LocalIndex | None = None
        if local_index:
            self.local = LocalIndex(engine, namespace, self.parameters, guard=self.guarded)

    # -- writes ---------------------------------------------------------------------------

    def add(self, text: str, source: str, metadata: Mapping[str, Any] | None = None) -> Document:
        """Store one document (replacing a different one of the same source) and return it."""
        self.import_documents([validate_document(text, source, metadata)])
        return self.get(source)

    def import_jsonl(
        self, lines: Iterable[str | bytes], progress: Progress | None = None
    ) -> ImportSummary:
        """Import JSON Lines ``{"source", "text", "metadata"}`` (``parse_jsonl``).

        ``lines`` is a file or an iterable of lines. All or nothing: a bad line refuses the
        whole file (``ValidationError`` naming the line), and so does a line longer than
        ``MAX_LINE_BYTES`` (from a file, refused unread past the bound). See
        ``import_documents`` for what is written.
        """
        return self.import_documents(parse_jsonl(lines), progress)

    def import_documents(
        self, documents: Sequence[DocumentInput], progress: Progress | None = None
    ) -> ImportSummary:
        """Store documents in one transaction; idempotent by source and content hash.

        A new source is added; a known source with the same text and metadata is left
        untouched (nothing written); a changed one keeps ``created_at`` and has its passages
        replaced. ``progress(n)`` is called after every ``n`` documents handled.
        """
        documents = list(documents)
        sources = [document.source for document in documents]
        if len(set(sources)) != len(sources):
            repeated = next(s for s in sources if sources.count(s) > 1)
            raise ValidationError("source", f"{repeated!r} is given twice")
        analyzer = self._active().analyzer
        prepared = {
            document.source: prepare_passages(document.text, self._max_passage_chars, analyzer)
            for document in documents
        }
        return self._write(lambda c: self._import(c, documents, prepared, progress, analyzer))

    def delete(self, source: str, *, missing_ok: bool = False) -> bool:
        """Delete the document ``source`` and its passages; ``True`` once deleted. None there:
        ``NotFoundError``, or ``False`` with ``missing_ok`` (a delete that may be repeated)."""
        check_source(source)

        def work(connection: sa.Connection) -> int:
            self._lock(connection)
            result = connection.execute(
                sa.delete(DOCUMENTS).where(
                    DOCUMENTS.c.namespace == self.namespace, DOCUMENTS.c.source == source
                )
            )
            return int(result.rowcount)

        if self._write(work) > 0:
            return True
        if missing_ok:
            return False
        raise NotFoundError(f"no document {source!r} in namespace {self.namespace!r}")

    def reembed(self, progress: Progress | None = None, batch_size: int = BATCH_SIZE) -> int:
        """Embed every chunk not embedded by this knowledge base's embedder; returns how many.

        Runs in batches of ``batch_size`` chunks, one transaction each, so a long run can be
        interrupted and resumed. Without an ``embed_fn`` there is nothing to do (``0``).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size", f"must be an integer >= 1, got {batch_size!r}")
        active = self.settings()
        if active.embed_fn is None or active.embedder is None:
            return 0
        done = 0
        stale = sa.or_(CHUNKS.c.embedder.is_(None), CHUNKS.c.embedder != active.embedder)
        select = (
            sa.select(CHUNKS.c.id, CHUNKS.c.text)
            .where(CHUNKS.c.namespace == self.namespace, stale)
            .order_by(CHUNKS.c.id)
            .limit(batch_size)
        )
        statement = (
            sa.update(CHUNKS)
            .where(CHUNKS.c.id == sa.bindparam("chunk_id"))
            .values(
                embedding=sa.bindparam("embedding"),
                embedder=sa.bindparam("embedder"),
                dimension=sa.bindparam("dimension"),
            )
        )
        last = 0
        while True:
            after = select.where(CHUNKS.c.id > last)
            rows = self._read(partial(_all_rows, after))
            if not rows:
                return done
            vectors = embed_passages(active.embed_fn, [row[1] for row in rows])
            check_dimension(vectors, active, self.namespace)
            updates = [
                {"chunk_id": row[0], **_embedding_columns(vector, active.embedder)}
                for row, vector in zip(rows, vectors, strict=True)
            ]
            self._write(partial(_execute_many, statement, updates))
            done += len(rows)
            last = rows[-1][0]
            if progress is not None:
                progress(len(rows))

    # -- the import itself ----------------------------------------------------------------

    def _import(
        self,
        connection: sa.Connection,
        documents: Sequence[DocumentInput],
        prepared: Mapping[str, Sequence[Passage]],
        progress: Progress | None,
        analyzer: Analyzer,
    ) -> ImportSummary:
        self._lock(connection)
        active = self._configuration.resolve(read_settings(connection, self.namespace))
        if active.analyzer is not analyzer:
            # The namespace was reconfigured since the passages were analysed: again, with
            # its analyzer, under the lock that keeps it from changing again.
            prepared = {
                d.source: prepare_passages(d.text, self._max_passage_chars, active.analyzer)
                for d in documents
            }
        known = self._known(connection, [d.source for d in documents])
        added = updated = unchanged = 0
        now = self._clock()
        strategy = strategy_of(connection)
        # Chunk rows made, not yet inserted, and the documents they wait with: inserted
        # batch by batch, or ``chunks_per_statement`` at a time (PostgreSQL, decision 0097).
        pending: Rows = []
        waiting = 0
        for start in range(0, len(documents), BATCH_SIZE):
            batch = documents[start : start + BATCH_SIZE]
            fresh = [d for d in batch if d.source not in known]
            changed = [
                d for d in batch if d.source in known and known[d.source][1] != d.content_hash
            ]
            unchanged += len(batch) - len(fresh) - len(changed)
            ids: dict[str, int] = {}
            if fresh:
                ids.update(self._insert_documents(connection, strategy, fresh, now))
            if changed:
                ids.update(self._update_documents(connection, changed, known, now))
            pending += self._chunk_rows(
                [(ids[d.source], prepared[d.source]) for d in batch if d.source in ids], active
            )
            added += len(fresh)
            updated += len(changed)
            waiting += len(batch)
            last = start + BATCH_SIZE >= len(documents)
            if len(pending) >= strategy.chunks_per_statement or last:
                if pending:
                    strategy.insert_rows(connection, CHUNKS, pending, (CHUNKS.c.id,))
                pending = []
                if progress is not None:
                    progress(waiting)
                waiting = 0
        return ImportSummary(added=added, updated=updated, unchanged=unchanged)

    def _lock(self, connection: sa.Connection) -> None:
        connection.execute(lock_namespace_statement(connection, self.namespace))

    def _known(
        self, connection: sa.Connection, sources: Sequence[str]
    ) -> dict[str, tuple[int, str]]:
        known: dict[str, tuple[int, str]] = {}
        for start in range(0, len(sources), BATCH_SIZE):
            rows = connection.execute(
                sa.select(DOCUMENTS.c.source, DOCUMENTS.c.id, DOCUMENTS.c.content_hash).where(
                    DOCUMENTS.c.namespace == self.namespace,
                    DOCUMENTS.c.source.in_(sources[start : start + BATCH_SIZE]),
                )
            )
            known.update({source: (int(i), digest) for source, i, digest in rows})
        return known

    def _insert_documents(
        self,
        connection: sa.Connection,
        strategy: KnowledgeStrategy,
        documents: Sequence[DocumentInput],
        now: datetime,
    ) -> dict[str, int]:
        # Each row returns its own source: the order of the rows returned does not matter.
        rows = strategy.insert_rows(
            connection,
            DOCUMENTS,
            [
                {
                    "namespace": self.namespace,
                    "source": d.source,
                    "metadata": dict(d.metadata),
                    "content_hash": d.content_hash,
                    "created_at": now,
                    "updated_at": now,
                }
                for d in documents
            ],
            (DOCUMENTS.c.id, DOCUMENTS.c.source),
        )
        return {source: int(i) for i, source in rows}

    def _update_documents(
        self,
        connection: sa.Connection,
        documents: Sequence[DocumentInput],
        known: Mapping[str, tuple[int, str]],
        now: datetime,
    ) -> dict[str, int]:
        ids = {d.source: known[d.source][0] for d in documents}
        connection.execute(sa.delete(CHUNKS).where(CHUNKS.c.document_id.in_(list(ids.values()))))
        connection.execute(
            sa.update(DOCUMENTS)
            .where(DOCUMENTS.c.id == sa.bindparam("document_id"))
            .values(
                metadata=sa.bindparam("new_metadata"),
                content_hash=sa.bindparam("new_hash"),
                updated_at=sa.bindparam("new_updated_at"),
            ),
            [
                {
                    "document_id": ids[d.source],
                    "new_metadata": dict(d.metadata),
                    "new_hash": d.content_hash,
                    "new_updated_at": now,
                }
                for d in documents
            ],
        )
        return ids

    def _chunk_rows(
        self, documents: Sequence[tuple[int, Sequence[Passage]]], active: Active
    ) -> Rows:
        """The ``chunks`` rows of ``documents`` (id and passages), embedded. Inserted by
        ``KnowledgeStrategy.insert_rows`` in multi-row statements, so PostgreSQL's
        statement-level statistics triggers run once per statement, not once per row
        (decisions 0090, 0097)."""
        passages = [(document_id, p) for document_id, group in documents for p in group]
        if not passages:
            return []
        vectors: Sequence[Any] = [None] * len(passages)
        if active.embed_fn is not None:
            vectors = embed_passages(active.embed_fn, [p.text for _, p in passages])
            check_dimension(vectors, active, self.namespace)
        return [
            {
                "document_id": document_id,
                "namespace": self.namespace,
                "position": passage.position,
                "text": passage.text,
                "terms": passage.terms,
                "term_counts": dict(passage.counts),
                "length": passage.length,
                **_embedding_columns(vector, active.embedder),
            }
            for (document_id, passage), vector in zip(passages, vectors, strict=True)
        ]

    # -- transactions ---------------------------------------------------------------------

    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in one committed transaction, retrying transient SQLite locks."""

        def attempt() -> T:
            with translate_errors(self._engine.url), self._engine.begin() as connection:
                return work(connection)

        return retry_locks(self._engine, attempt, self._sleep)

    def _read(self, work: Callable[[sa.Connection], T]) -> T:
        return tolerating_bytes(self._engine, lambda: self._read_once(work))

    def _read_once(self, work: Callable[[sa.Connection], T]) -> T:
        with (
            translate_errors(self._engine.url),
            read_only(self._engine).connect() as connection,
            connection.begin(),
        ):
            return work(connection)


def _all_rows(statement: sa.Select[Any], connection: sa.Connection) -> list[Any]:
    return list(connection.execute(statement).all())


def _execute_many(
    statement: sa.Update, rows: Sequence[Mapping[str, Any]], connection: sa.Connection
) -> None:
    connection.execute(statement, list(rows))


def _embedding_columns(vector: Any, embedder: str | None) -> dict[str, Any]:
    if vector is None:
        return {"embedding": None, "embedder": None, "dimension": None}
    return {
        "embedding": np.asarray(vector, dtype="<f4").tobytes(),
        "embedder": embedder,
        "dimension": int(vector.shape[0]),
    }
