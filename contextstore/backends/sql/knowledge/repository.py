"""``KnowledgeBase``: the fleet's documents in SQL, searched through the database's full-text index.

Every process of a fleet reads the same corpus: a document one process adds is found by every
other on its next search, without restarting or re-indexing anything. ``search`` ranks with
``contextstore.core.ranking`` — the function ``InMemoryRetriever`` uses — over the namespace's
statistics, which the migrations' triggers keep in ``knowledge_stats`` and
``knowledge_terms``; so whenever a query's matches fit ``candidate_limit``, SQLite,
PostgreSQL and an ``InMemoryRetriever`` holding the same documents return the same chunks in
the same order. The statements live in ``knowledge_queries``, apart from their execution.

A lexical search is one statement in autocommit (one snapshot, one round trip, no BEGIN or
COMMIT); a hybrid or vector search adds one read transaction for the nearest chunks
(``knowledge_vectors``). Every other public method is one transaction of its own. Writes
validate everything first (``contextstore.core.knowledge``) and raise ``ValidationError``
naming the field or line before anything is written; an import is all or nothing.
Embeddings are computed once, when a document is written, with ``embed_fn``; a search embeds
only its query.
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
from contextstore.backends.sql.knowledge.config import ConfiguredKnowledge
from contextstore.backends.sql.knowledge.index import ATTEMPTS, LocalIndex, Snapshot
from contextstore.backends.sql.knowledge.queries import (
    CHUNKS,
    DOCUMENTS,
    SearchPlan,
    SearchStatements,
    generation_from,
    generation_statement,
    lock_namespace_statement,
    plan_search,
    read_metadata,
)
from contextstore.backends.sql.knowledge.settings import (
    Active,
    Configuration,
    build_embedder,
    check_dimension,
    check_embedder,
    read_settings,
)
from contextstore.backends.sql.knowledge.vectors import (
    MARGIN,
    HybridPlan,
    VectorQuery,
    describe,
    finish_hybrid,
    plan_hybrid,
    vector_backend,
    vector_candidates,
)
from contextstore.backends.sql.repository import ImportSummary
from contextstore.backends.sql.transactions import retry_locks
from contextstore.backends.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_json,
    check_text,
    printable,
    raw_text,
    read_timestamp,
    safe_timestamp,
)
from contextstore.core.analysis import QueryAnalysis
from contextstore.core.analyzers import Analyzer, analyzer_named
from contextstore.core.compose import Chunk
from contextstore.core.embedding import EmbedFn
from contextstore.core.knowledge import (
    Document,
    DocumentInput,
    Passage,
    embed_passages,
    parse_jsonl,
    prepare_passages,
    validate_document,
    validate_filters,
)
from contextstore.core.ranking import RankingParameters, unit_vector
from contextstore.core.retrieval import DEFAULT_PASSAGE_CHARS, SearchMode, search_mode
from contextstore.core.tokens import index_term
from contextstore.core.validation import (
    check_count,
    check_integer,
    check_optional_count,
    optional_storable_text,
    storable_text,
)
from contextstore.errors import NotFoundError, ValidationError

__all__ = ["DEFAULT_CANDIDATE_LIMIT", "ImportSummary", "KnowledgeBase"]

# Candidates fetched per search. Enough for every query whose lexical matches matter; the
# full-text rank picks which ones when more match.
DEFAULT_CANDIDATE_LIMIT: Final = 1000
# Documents per insert batch (and per progress report) during an import.
BATCH_SIZE: Final = 500
# The most terms of a search statement ``plan_small`` builds and compiles where it is called
# (the async knowledge base: on the event loop, where a thread would cost the loop more in
# GIL hand-offs than the compilation); a larger one is left to a worker thread.
COMPILED_IN_PLACE_TERMS: Final = 16
# Plans one search makes at most when the namespace is reconfigured under it (each switch
# is a whole reindex, so a second one within a search is already unlikely).
STALE_REPLANS: Final = 3

T = TypeVar("T")
Progress = Callable[[int], None]
Documents = list[Document]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KnowledgeBase(ConfiguredKnowledge):
    """One namespace's documents; a ``Retriever`` for ``ContextEngine``.

    ``embed_fn`` (for example ``HashingEmbedder()``) turns on fusion with cosine similarity;
    ``analyzer`` (``"simple"``, ``"english"``) and ``embedder`` (a registry name) ask for a
    namespace's configuration: a namespace configured in the database (``configure``) is
    analysed and embedded as stored, and a different request is refused on first use
    (``knowledge_settings``);
    ``keyword_weight``, ``k1``, ``b`` and ``max_passage_chars`` mean what they mean for
    ``InMemoryRetriever``. ``candidate_limit`` (≥ 1) bounds the chunks one search reads in
    SQL. Without an embedder, and unless ``local_index=False``, a search ranks in a
    process-local index of the namespace (``knowledge_index``): exact whatever the number of
    matches, rebuilt on the first search after any write. ``mode`` is the default search
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
        # generation (``knowledge_index``, decision 0089); fusion with an embedder stays in SQL.
        self.local: LocalIndex | None = None
        if local_index:
            self.local = LocalIndex(engine, namespace, self.parameters, guard=self.guarded)

    # -- search ---------------------------------------------------------------------------

    def search(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> list[Chunk]:
        """Up to ``top_k`` chunks for ``query``, best first: score, then source, then passage.

        Only chunks sharing a term with the query are returned (``[]`` for a blank query,
        ``top_k <= 0`` or an empty namespace). ``filters`` keep chunks whose document metadata
        matches every key (``contextstore.core.knowledge.validate_filters``). A query the embedder
        fails on is ranked by BM25 alone.

        ``mode`` (default: the knowledge base's) ranks as ``InMemoryRetriever`` does:
        ``lexical`` by BM25; ``vector`` by cosine over every chunk the filters allow; ``hybrid``
        fuses both over the lexical matches and the nearest chunks, which the database finds
        (``knowledge_vectors``), so a chunk sharing no word with the query can be found.
        """
        chosen = self.mode if mode is None else search_mode(mode)
        if self.local is not None and chosen != "vector":
            found = self._local_search(self.local, query, top_k, filters)
            if found is not None:
                return found
        return self.finish(self.plan(query, top_k, filters, mode))

    def _local_search(
        self, local: LocalIndex, query: str, top_k: int, filters: Mapping[str, Any] | None
    ) -> list[Chunk] | None:
        """The local index's answer, or ``None``: search in SQL (an embedder, a namespace too
        large, or one written faster than the index follows)."""
        for _ in range(ATTEMPTS):
            request = self.lexical_request(query, top_k, filters)
            if request is None:
                return None
            terms, weights, checked = request
            if not terms or top_k <= 0:
                return []
            snapshot = local.snapshot
            if snapshot is None:
                snapshot = local.build_now()
                if snapshot is None:
                    return None
            if not self.agrees(local, snapshot, self.settings):
                continue
            ranked = snapshot.rank(terms, top_k, checked, weights)
            rows = self.guarded(partial(local.fetch, local.fetch_values(ranked, snapshot)))
            answer = local.answer(snapshot, ranked, rows)
            if answer is not None:
                return answer
        return None

    def lexical_request(
        self, query: str, top_k: int, filters: Mapping[str, Any] | None
    ) -> tuple[tuple[str, ...], dict[str, int] | None, dict[str, tuple[Any, ...]]] | None:
        """The checked arguments of a lexical search: index terms, their weights (``None``:
        all 1) and the filters; ``None`` when the namespace embeds (a fused search)."""
        if not isinstance(query, str):
            raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        check_integer(top_k, "top_k")
        checked = validate_filters(filters)
        active = self._active()
        if active.embed_fn is not None:
            return None
        weighted = weighted_query_terms(active.analyzer, query)
        terms = tuple(index_term(term) for term, _ in weighted)
        weights = None
        if active.analyzer.name != "simple":
            weights = {index_term(term): weight for term, weight in weighted}
        return terms, weights, checked

    def agrees(self, local: LocalIndex, snapshot: Snapshot, refresh: Callable[[], Any]) -> bool:
        """Whether ``snapshot`` was built with the settings queries are analysed with; if
        not, ``refresh`` (reads the settings) is called and a snapshot older than them
        dropped, and the caller analyses the query again."""
        if snapshot.settings_version == self._active().version:
            return True
        refresh()
        if self._active().version > snapshot.settings_version:
            local.drop(snapshot)
        return False

    def active_version(self) -> int:
        """The settings version queries are analysed for now (no I/O)."""
        return self._active().version

    @property
    def url(self) -> sa.URL:
        return self._engine.url

    def guarded(self, read: Callable[[], T]) -> T:
        """``read()`` with the database's errors translated, and SQLite text that is not
        UTF-8 read leniently."""

        def translated() -> T:
            with translate_errors(self._engine.url):
                return read()

        return tolerating_bytes(self._engine, translated)

    def finish(self, plan: SearchPlan | HybridPlan) -> list[Chunk]:
        """Run ``plan``'s statements (compiled already) and rank their rows: ``search`` after
        ``plan``. The async knowledge base plans in a worker thread and finishes on the loop."""
        lexical = plan.lexical if isinstance(plan, HybridPlan) else plan
        rows: Sequence[Any] = []
        # A plan made for other settings than the index's (a reconfigure switched it) is
        # made again: a search answers from one index, analysed as that index was.
        for _ in range(STALE_REPLANS):
            rows = self._lexical_rows(lexical)
            if lexical.statement is None or not self._stale(lexical, rows):
                break
            self.settings()
            plan = self.plan(*lexical.request)
            lexical = plan.lexical if isinstance(plan, HybridPlan) else plan
        if isinstance(plan, HybridPlan):
            return finish_hybrid(plan, rows, self._vectors, self.parameters)
        return lexical.finish(rows)

    def _lexical_rows(self, plan: SearchPlan) -> Sequence[Any]:
        if plan.statement is None:
            return []
        statement, values = plan.statement
        # One statement in autocommit: one snapshot (the statistics and the candidates agree)
        # and one round trip, with no BEGIN, COMMIT or ROLLBACK around it.

        def select(statement: Any, values: dict[str, Any]) -> Sequence[Any]:
            with translate_errors(self._engine.url):
                return statement.rows(values)  # type: ignore[no-any-return]

        return tolerating_bytes(self._engine, partial(select, statement, values))

    def _vectors(self, query: VectorQuery) -> tuple[list[Any], float]:
        backend = self.vector_backend()
        return self._read(lambda c: vector_candidates(c, backend, query))

    def vector_backend(self) -> str:
        """How this database finds vector candidates: ``sqlite-vec``, ``pgvector`` or
        ``exact scan`` (``knowledge_vectors``); read once."""
        if self._vector_backend is None:
            self._vector_backend = self._read(vector_backend)
        return self._vector_backend

    def describe_vectors(self) -> str:
        """How this database searches vectors, in words (``contextstore db check``)."""
        return self._read(describe)

    def plan(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchPlan | HybridPlan:
        """``search`` without the I/O: validated arguments, the query analysed and embedded
        (once), the one statement to run, compiled, and the pure ranking of its rows.

        ``search`` is ``finish(plan(…))``. All the CPU work that grows with the query is
        here, so an async caller runs it in a worker thread. Raises ``ValidationError`` like
        ``search``.
        """
        plan = self._plan(query, top_k, filters, mode, compile_up_to=None)
        assert plan is not None  # nothing left uncompiled: a plan always
        return plan

    def plan_small(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchPlan | HybridPlan | None:
        """``plan``, or ``None`` when it would build a statement of more than
        ``COMPILED_IN_PLACE_TERMS`` terms (tens of milliseconds): an async caller plans a
        short query on the loop, and a costly one in a thread."""
        return self._plan(query, top_k, filters, mode, compile_up_to=COMPILED_IN_PLACE_TERMS)

    def _plan(
        self,
        query: str,
        top_k: int,
        filters: Mapping[str, Any] | None,
        mode: SearchMode | None,
        *,
        compile_up_to: int | None,
    ) -> SearchPlan | HybridPlan | None:
        chosen = self.mode if mode is None else search_mode(mode)
        if not isinstance(query, str):
            raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        check_integer(top_k, "top_k")
        checked = validate_filters(filters)
        active = self._active()
        weighted = weighted_query_terms(active.analyzer, query)
        terms = tuple(index_term(term) for term, _ in weighted)
        weights = None
        if active.analyzer.name != "simple":
            weights = {index_term(term): weight for term, weight in weighted}
        if chosen == "vector" and active.embedder is None:
            raise ValidationError("mode", "'vector' needs an embedder")
        unit = None
        if chosen != "lexical" and top_k > 0:
            unit = self._query_vector(query, active)
        search = partial(
            plan_search,
            self._statements,
            self.namespace,
            top_k=top_k,
            filters=checked,
            candidate_limit=self.candidate_limit,
            parameters=self.parameters,
            embedder=active.embedder,
            compile_up_to=compile_up_to,
            settings_version=active.version,
            weights=weights,
            request=(query, top_k, filters, mode),
        )
        if unit is None or active.embedder is None:
            # Lexical, or the query could not be embedded: BM25 alone (nothing for vector).
            return search(terms=() if chosen == "vector" else terms)
        vectors = VectorQuery(
            self.namespace,
            active.embedder,
            unit,
            checked,
            top_k + MARGIN,
            chosen,
            self.exact_vectors,
        )
        return plan_hybrid(search, terms, vectors)

    def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Chunk]:
        """``search`` in the default mode, for the ``Retriever`` protocol (``analysis`` is not
        read)."""
        return self.search(query, top_k, filters)

    def generation(self) -> int:
        """The namespace's knowledge generation: it grows with every change (0 before any).

        One primary-key read; a context composed at another generation is stale.
        """
        statement = generation_statement(self.namespace)
        # Alone in autocommit: one statement, one round trip, on every run of the engine.
        with translate_errors(self._engine.url), self._autocommit.connect() as c:
            return generation_from(c.execute(statement).first())

    def _query_vector(
        self, query: str, active: Active
    ) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        if active.embed_fn is None:
            return None
        try:
            raw = np.asarray(active.embed_fn(query), dtype=np.float64).ravel()
        except Exception:
            return None
        if active.dimension is not None and raw.shape[0] != active.dimension:
            raise ValidationError(
                "embedder",
                f"{active.registry_name} returned a {raw.shape[0]}-dimension query vector; "
                f"namespace {self.namespace!r} records {active.dimension} dimensions",
            )
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
        _check_source(source)

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
                connection,
                [(ids[d.source], prepared[d.source]) for d in batch if d.source in ids],
                active,
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
        self,
        connection: sa.Connection,
        documents: Sequence[tuple[int, Sequence[Passage]]],
        active: Active,
    ) -> None:
        passages = [(document_id, p) for document_id, group in documents for p in group]
        if not passages:
            return
        vectors: Sequence[Any] = [None] * len(passages)
        if active.embed_fn is not None:
            vectors = embed_passages(active.embed_fn, [p.text for _, p in passages])
            check_dimension(vectors, active, self.namespace)
        # RETURNING makes SQLAlchemy send the rows as multi-row INSERTs ("insertmanyvalues"),
        # so PostgreSQL's statement-level statistics triggers run once per page of rows, not
        # once per row: per-row statements updated the namespace's statistics row once per
        # chunk, piling up row versions one transaction must walk (decision 0090).
        connection.execute(
            sa.insert(CHUNKS).returning(CHUNKS.c.id),
            [
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
            ],
        )

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


def weighted_query_terms(analyzer: Analyzer, query: str) -> tuple[tuple[str, int], ...]:
    """The query's terms and weights under the namespace's analyzer (the CPU work of a
    search's analysis, which an async search runs off the loop for a long query)."""
    return analyzer.weighted_query_terms(query)


def _check_source(source: object) -> None:
    storable_text(source, "source")


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
