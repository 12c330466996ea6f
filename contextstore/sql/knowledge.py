"""``KnowledgeBase``: the fleet's documents in SQL, searched through the database's full-text index.

Every process of a fleet reads the same corpus: a document one process adds is found by every
other on its next search, without restarting or re-indexing anything. ``search`` ranks with
``contextstore.ranking`` — the function ``InMemoryRetriever`` uses — over the namespace's
statistics, which the migrations' triggers keep in ``knowledge_stats`` and
``knowledge_terms``; so whenever a query's matches fit ``candidate_limit``, SQLite,
PostgreSQL and an ``InMemoryRetriever`` holding the same documents return the same chunks in
the same order. The statements live in ``knowledge_queries``, apart from their execution.

A search is one statement in autocommit (one snapshot, one round trip, no BEGIN or COMMIT);
every other public method is one transaction of its own. Writes validate everything first
(``contextstore.knowledge``) and raise ``ValidationError`` naming the field or line before
anything is written; an import is all or nothing. Embeddings are computed once, when a
document is written, with ``embed_fn``; a search embeds only its query.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final, TypeVar

import numpy as np
import sqlalchemy as sa

from contextstore.analysis import QueryAnalysis
from contextstore.compose import Chunk
from contextstore.embedding import EmbedFn
from contextstore.errors import NotFoundError, ValidationError
from contextstore.knowledge import (
    Document,
    DocumentInput,
    Passage,
    embed_passages,
    embedder_name,
    parse_jsonl,
    prepare_passages,
    validate_document,
    validate_filters,
)
from contextstore.ranking import RankingParameters, query_terms, unit_vector
from contextstore.retrieval import DEFAULT_PASSAGE_CHARS
from contextstore.sql.database import autocommit, read_only, tolerating_bytes, translate_errors
from contextstore.sql.knowledge_queries import (
    CHUNKS,
    DOCUMENTS,
    SearchPlan,
    generation_from,
    generation_statement,
    lock_namespace_statement,
    plan_search,
    read_metadata,
)
from contextstore.sql.repository import ImportSummary
from contextstore.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_json,
    check_text,
    printable,
    raw_text,
    read_timestamp,
    safe_timestamp,
)
from contextstore.tokens import index_term

__all__ = ["DEFAULT_CANDIDATE_LIMIT", "ImportSummary", "KnowledgeBase"]

# Candidates fetched per search. Enough for every query whose lexical matches matter; the
# full-text rank picks which ones when more match.
DEFAULT_CANDIDATE_LIMIT: Final = 1000
# Documents per insert batch (and per progress report) during an import.
BATCH_SIZE: Final = 500
# SQLite may report "database is locked" at once instead of waiting (a WAL recovery, a stale
# snapshot); such a failure is transient and retried, backing off.
LOCK_RETRIES: Final = 5
LOCK_BACKOFF_SECONDS: Final = 0.02
IMMEDIATE_SECONDS: Final = 1.0

T = TypeVar("T")
Progress = Callable[[int], None]
Documents = list[Document]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KnowledgeBase:
    """One namespace's documents; a ``Retriever`` for ``ContextEngine``.

    ``embed_fn`` (for example ``HashingEmbedder()``) turns on fusion with cosine similarity;
    ``keyword_weight``, ``k1``, ``b`` and ``max_passage_chars`` mean what they mean for
    ``InMemoryRetriever``. ``candidate_limit`` (≥ 1) bounds the chunks one search reads.
    Thread-safe: every call opens its own connection.
    """

    def __init__(
        self,
        engine: sa.Engine,
        namespace: str = "default",
        *,
        embed_fn: EmbedFn | None = None,
        candidate_limit: int = DEFAULT_CANDIDATE_LIMIT,
        keyword_weight: float = 0.6,
        k1: float = 1.5,
        b: float = 0.75,
        max_passage_chars: int = DEFAULT_PASSAGE_CHARS,
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
        self.namespace = namespace
        self.embed_fn = embed_fn
        self.embedder = None if embed_fn is None else embedder_name(embed_fn)
        self.candidate_limit = candidate_limit
        self.parameters = RankingParameters(float(k1), float(b), float(keyword_weight))
        self._max_passage_chars = max_passage_chars
        self._clock = clock
        # How a retry waits out a transient SQLite lock; the async knowledge base passes one
        # that yields to the event loop instead of blocking it.
        self._sleep = sleep

    # -- search ---------------------------------------------------------------------------

    def search(
        self, query: str, top_k: int = 5, filters: Mapping[str, Any] | None = None
    ) -> list[Chunk]:
        """Up to ``top_k`` chunks for ``query``, best first: score, then source, then passage.

        Only chunks sharing a term with the query are returned (``[]`` for a blank query,
        ``top_k <= 0`` or an empty namespace). ``filters`` keep chunks whose document metadata
        matches every key (``contextstore.knowledge.validate_filters``). A query the embedder
        fails on is ranked by BM25 alone.
        """
        plan = self.plan(query, top_k, filters)
        if plan.statement is None:
            return []
        statement, values = plan.statement
        # One statement in autocommit: one snapshot (the statistics and the candidates agree)
        # and one round trip, with no BEGIN, COMMIT or ROLLBACK around it.

        def select() -> Sequence[Any]:
            with translate_errors(self._engine.url), self._autocommit.connect() as c:
                return c.execute(statement, values).all()

        return plan.finish(tolerating_bytes(self._engine, select))

    def plan(
        self, query: str, top_k: int = 5, filters: Mapping[str, Any] | None = None
    ) -> SearchPlan:
        """``search`` without the I/O: validated arguments, the query embedded (once), the
        one statement to run and the pure ranking of its rows.

        ``search`` is ``plan.finish(rows of plan.statement)``; an async connection can run
        the same statement (``AsyncConnection.execute(statement, values)``) and finish the
        same plan. Raises ``ValidationError`` like ``search``.
        """
        if not isinstance(query, str):
            raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise ValidationError("top_k", f"must be an integer, got {top_k!r}")
        checked = validate_filters(filters)
        terms = tuple(index_term(term) for term in query_terms(query))
        return plan_search(
            self._engine.dialect.name,
            self.namespace,
            terms,
            top_k,
            checked,
            candidate_limit=self.candidate_limit,
            parameters=self.parameters,
            query_vector=self._query_vector(query) if terms and top_k > 0 else None,
            embedder=self.embedder,
        )

    def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Chunk]:
        """``search`` for the ``Retriever`` protocol (``analysis`` is not read)."""
        return self.search(query, top_k, filters)

    def generation(self) -> int:
        """The namespace's knowledge generation: it grows with every change (0 before any).

        One primary-key read; a context composed at another generation is stale.
        """
        statement = generation_statement(self.namespace)
        # Alone in autocommit: one statement, one round trip, on every run of the engine.
        with translate_errors(self._engine.url), self._autocommit.connect() as c:
            return generation_from(c.execute(statement).first())

    def _query_vector(self, query: str) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        if self.embed_fn is None:
            return None
        try:
            raw = np.asarray(self.embed_fn(query), dtype=np.float64).ravel()
        except Exception:
            return None
        return unit_vector(raw, raw.shape[0]) if raw.shape[0] > 0 else None

    # -- reads ----------------------------------------------------------------------------

    def get(self, source: str) -> Document:
        """The document ``source`` with its passages in order; ``NotFoundError`` if none."""
        _check_source(source)
        statement = (
            sa.select(*_document_columns(self._engine.dialect.name), CHUNKS.c.text)
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
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError("limit", f"must be an integer, zero or more, not {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("offset", f"must be an integer, zero or more, not {offset!r}")
        if prefix is not None and not isinstance(prefix, str):
            raise ValidationError("prefix", f"must be a string, got {type(prefix).__name__}")
        counts = (
            sa.select(CHUNKS.c.document_id, sa.func.count().label("n"))
            .where(CHUNKS.c.namespace == self.namespace)
            .group_by(CHUNKS.c.document_id)
            .subquery()
        )
        statement = (
            sa.select(
                *_document_columns(self._engine.dialect.name), sa.func.coalesce(counts.c.n, 0)
            )
            .select_from(DOCUMENTS.outerjoin(counts, counts.c.document_id == DOCUMENTS.c.id))
            .where(DOCUMENTS.c.namespace == self.namespace)
            .order_by(_by_code_point(self._engine.dialect.name))
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

    # -- writes ---------------------------------------------------------------------------

    def add(self, text: str, source: str, metadata: Mapping[str, Any] | None = None) -> Document:
        """Store one document (replacing a different one of the same source) and return it."""
        self.import_documents([validate_document(text, source, metadata)])
        return self.get(source)

    def import_jsonl(
        self, lines: Iterable[str | bytes], progress: Progress | None = None
    ) -> ImportSummary:
        """Import JSON Lines ``{"source", "text", "metadata"}`` (``parse_jsonl``).

        All or nothing: a bad line refuses the whole file (``ValidationError`` naming the
        line). See ``import_documents`` for what is written.
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
        prepared = {
            document.source: prepare_passages(document.text, self._max_passage_chars)
            for document in documents
        }
        return self._write(lambda c: self._import(c, documents, prepared, progress))

    def delete(self, source: str) -> None:
        """Delete the document ``source`` and its passages; ``NotFoundError`` if none."""
        _check_source(source)

        def work(connection: sa.Connection) -> int:
            self._lock(connection)
            result = connection.execute(
                sa.delete(DOCUMENTS).where(
                    DOCUMENTS.c.namespace == self.namespace, DOCUMENTS.c.source == source
                )
            )
            return int(result.rowcount)

        if self._write(work) == 0:
            raise NotFoundError(f"no document {source!r} in namespace {self.namespace!r}")

    def reembed(self, progress: Progress | None = None, batch_size: int = BATCH_SIZE) -> int:
        """Embed every chunk not embedded by this knowledge base's embedder; returns how many.

        Runs in batches of ``batch_size`` chunks, one transaction each, so a long run can be
        interrupted and resumed. Without an ``embed_fn`` there is nothing to do (``0``).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size", f"must be an integer >= 1, got {batch_size!r}")
        if self.embed_fn is None or self.embedder is None:
            return 0
        done = 0
        stale = sa.or_(CHUNKS.c.embedder.is_(None), CHUNKS.c.embedder != self.embedder)
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
            vectors = embed_passages(self.embed_fn, [row[1] for row in rows])
            updates = [
                {"chunk_id": row[0], **_embedding_columns(vector, self.embedder)}
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
    ) -> ImportSummary:
        self._lock(connection)
        known = self._known(connection, [d.source for d in documents])
        added = updated = unchanged = 0
        now = self._clock()
        for start in range(0, len(documents), BATCH_SIZE):
            batch = documents[start : start + BATCH_SIZE]
            fresh = [d for d in batch if d.source not in known]
            changed = [
                d for d in batch if d.source in known and known[d.source][1] != d.content_hash
            ]
            unchanged += len(batch) - len(fresh) - len(changed)
            ids: dict[str, int] = {}
            if fresh:
                ids.update(self._insert_documents(connection, fresh, now))
            if changed:
                ids.update(self._update_documents(connection, changed, known, now))
            self._insert_chunks(
                connection, [(ids[d.source], prepared[d.source]) for d in batch if d.source in ids]
            )
            added += len(fresh)
            updated += len(changed)
            if progress is not None:
                progress(len(batch))
        return ImportSummary(added=added, updated=updated, unchanged=unchanged)

    def _lock(self, connection: sa.Connection) -> None:
        connection.execute(lock_namespace_statement(connection.dialect.name, self.namespace))

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
        self, connection: sa.Connection, documents: Sequence[DocumentInput], now: datetime
    ) -> dict[str, int]:
        statement = sa.insert(DOCUMENTS).returning(
            DOCUMENTS.c.id, DOCUMENTS.c.source, sort_by_parameter_order=True
        )
        rows = connection.execute(
            statement,
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

    def _insert_chunks(
        self, connection: sa.Connection, documents: Sequence[tuple[int, Sequence[Passage]]]
    ) -> None:
        passages = [(document_id, p) for document_id, group in documents for p in group]
        if not passages:
            return
        vectors: Sequence[Any] = [None] * len(passages)
        if self.embed_fn is not None:
            vectors = embed_passages(self.embed_fn, [p.text for _, p in passages])
        connection.execute(
            sa.insert(CHUNKS),
            [
                {
                    "document_id": document_id,
                    "namespace": self.namespace,
                    "position": passage.position,
                    "text": passage.text,
                    "terms": passage.terms,
                    "term_counts": dict(passage.counts),
                    "length": passage.length,
                    **_embedding_columns(vector, self.embedder),
                }
                for (document_id, passage), vector in zip(passages, vectors, strict=True)
            ],
        )

    # -- transactions ---------------------------------------------------------------------

    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in one committed transaction, retrying transient SQLite locks."""
        for attempt in range(LOCK_RETRIES + 1):
            started = time.monotonic()
            try:
                with translate_errors(self._engine.url), self._engine.begin() as connection:
                    return work(connection)
            except Exception as error:
                immediate = time.monotonic() - started < IMMEDIATE_SECONDS
                if attempt < LOCK_RETRIES and immediate and self._is_lock(error):
                    self._sleep(LOCK_BACKOFF_SECONDS * 2**attempt)
                    continue
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read(self, work: Callable[[sa.Connection], T]) -> T:
        return tolerating_bytes(self._engine, lambda: self._read_once(work))

    def _read_once(self, work: Callable[[sa.Connection], T]) -> T:
        with (
            translate_errors(self._engine.url),
            read_only(self._engine).connect() as connection,
            connection.begin(),
        ):
            return work(connection)

    def _is_lock(self, error: BaseException) -> bool:
        if self._engine.dialect.name != "sqlite":
            return False
        cause = error.__cause__ if error.__cause__ is not None else error
        message = str(getattr(cause, "orig", cause)).lower()
        return "database is locked" in message or "database is busy" in message


def _document_columns(dialect: str) -> tuple[sa.ColumnElement[Any], ...]:
    """The documents' columns, metadata and timestamps fetched in a form the driver cannot
    fail on: a row typed by hand in SQL is then skipped (or named) by ``_document``, instead
    of failing the statement and every other document with it."""
    d = DOCUMENTS.c
    metadata = sa.type_coerce(d["metadata"], sa.String()) if dialect == "sqlite" else d["metadata"]
    return (
        d.source,
        metadata,
        d.content_hash,
        safe_timestamp(d.created_at, dialect),
        safe_timestamp(d.updated_at, dialect),
        raw_text(d.created_at),
        raw_text(d.updated_at),
    )


def _check_source(source: object) -> None:
    if not isinstance(source, str):
        raise ValidationError("source", f"must be a string, got {type(source).__name__}")


def _all_rows(statement: sa.Select[Any], connection: sa.Connection) -> list[Any]:
    return list(connection.execute(statement).all())


def _execute_many(
    statement: sa.Update, rows: Sequence[Mapping[str, Any]], connection: sa.Connection
) -> None:
    connection.execute(statement, list(rows))


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


def _by_code_point(dialect: str) -> sa.ColumnElement[Any]:
    # PostgreSQL's default collation would sort by locale; "C" sorts by code point, as SQLite.
    if dialect == "postgresql":
        return DOCUMENTS.c.source.collate("C")
    return DOCUMENTS.c.source


def _embedding_columns(vector: Any, embedder: str | None) -> dict[str, Any]:
    if vector is None:
        return {"embedding": None, "embedder": None, "dimension": None}
    return {
        "embedding": np.asarray(vector, dtype="<f4").tobytes(),
        "embedder": embedder,
        "dimension": int(vector.shape[0]),
    }
