"""The knowledge base's statements, and the pure step that turns their rows into chunks.

Nothing here executes anything: each function builds a SQLAlchemy statement, or reads rows a
caller fetched. A search's statement is compiled once per shape and kept
(``SearchStatements``, bounded); ``KnowledgeBase`` sends it on a pooled driver connection
(``DirectStatement``), from a plain thread or through the async engine's greenlet bridge, and
hands the rows to the same ``SearchPlan.finish``, so a search has one definition whichever
driver does the I/O. Building and compiling happen in ``plan``, never while rows are awaited.

A search is one statement, run in autocommit: at most ``candidate_limit`` candidate chunks
found through the full-text index (FTS5 ``MATCH`` on SQLite, the GIN-indexed ``@@`` on
PostgreSQL: each database's ``KnowledgeStrategy.search_select``), best full-text rank first,
with the metadata filters applied in SQL; each row also carries the namespace's statistics
and the frequencies of the query's terms, read by uncorrelated scalar subqueries
(primary-key lookups of ``knowledge_stats`` and ``knowledge_terms``, evaluated once per
statement). One statement reads one snapshot, so the statistics always describe the corpus
the candidates come from, without a transaction around it. Nothing scans ``chunks``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.knowledge.filters import (
    Filters,
    filter_parameters,
    filter_shape,
)
from contextstore.backends.sql.knowledge.settings import settings_version_column
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.strategy import KnowledgeStrategy
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS, STATS, TERMS
from contextstore.backends.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_count,
    check_json,
    check_text,
    printable,
    read_count,
    shortened,
)
from contextstore.core.compose import Chunk
from contextstore.core.ranking import Candidate, CorpusStatistics, RankingParameters, rank

__all__ = [
    "CHUNKS",
    "DOCUMENTS",
    "MAX_CACHED_SEARCHES",
    "STATS",
    "TERMS",
    "SearchPlan",
    "SearchShape",
    "SearchStatements",
    "generation_from",
    "generation_statement",
    "lock_namespace_statement",
    "plan_search",
    "read_metadata",
    "read_term_counts",
    "search_statement",
    "search_template",
    "search_values",
]


def generation_statement(namespace: str) -> sa.Select[Any]:
    """The namespace's knowledge generation: one row, or none before its first document."""
    return sa.select(STATS.c.generation).where(STATS.c.namespace == namespace)


def generation_from(row: Sequence[Any] | None) -> int:
    """The generation ``generation_statement`` returned (0 when the namespace has no row)."""
    return 0 if row is None else int(row[0])


def lock_namespace_statement(
    bind: sa.Connection | sa.Engine | sa.Dialect | str, namespace: str
) -> sa.Insert:
    """Create the namespace's statistics row if missing and lock it until commit.

    Every knowledge write starts with it, so writers of one namespace take their turns (on
    SQLite they already do) and each sees what the previous one committed.
    """
    statement = (
        dialect_of(bind)
        .insert()(STATS)
        .values(namespace=namespace, generation=0, document_count=0, chunk_count=0, total_length=0)
    )
    return statement.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[STATS.c.namespace], set_={"generation": STATS.c.generation}
    )


def _statistics_columns(term_count: int) -> list[sa.ColumnElement[Any]]:
    """The namespace's chunk count and total length, then each query term's frequency.

    Uncorrelated scalar subqueries: the database evaluates each once per statement (an
    InitPlan on PostgreSQL, a once-only subroutine on SQLite), not once per row.
    """
    namespace: sa.BindParameter[Any] = sa.bindparam("ns")
    columns: list[sa.ColumnElement[Any]] = [
        sa.select(STATS.c.chunk_count).where(STATS.c.namespace == namespace).scalar_subquery(),
        sa.select(STATS.c.total_length).where(STATS.c.namespace == namespace).scalar_subquery(),
    ]
    for i in range(term_count):
        term = sa.bindparam(f"w{i}", type_=sa.Text())
        columns.append(
            sa.select(TERMS.c.frequency)
            .where(TERMS.c.namespace == namespace, TERMS.c.term == term)
            .scalar_subquery()
        )
    # Last: the version of the namespace's analyzer and embedder the index was built with.
    columns.append(settings_version_column(namespace))
    return columns


def search_template(
    strategy: KnowledgeStrategy,
    term_count: int,
    shape: tuple[tuple[str, ...], ...],
    with_vectors: bool,
) -> sa.Select[Any]:
    """The search statement of one shape, every value a bind parameter (``search_values``).

    Costly to build and compile (tens of milliseconds for 64 terms): ``SearchStatements``
    keeps each shape compiled, and nothing here runs on an event loop.
    """
    counts = [strategy.term_count(i) for i in range(term_count)]
    vectors = [CHUNKS.c.embedding, CHUNKS.c.embedder, CHUNKS.c.dimension] if with_vectors else []
    return strategy.search_select([*counts, *vectors, *_statistics_columns(term_count)], shape)


def search_values(
    strategy: KnowledgeStrategy,
    namespace: str,
    terms: Sequence[str],
    filters: Filters,
    limit: int,
) -> dict[str, Any]:
    """The bound values of ``search_template`` for ``terms`` and ``filters``."""
    values: dict[str, Any] = {"ns": namespace, "limit": limit}
    values.update(filter_parameters(strategy, filters))
    values.update({f"w{i}": term for i, term in enumerate(terms)})
    values["match"] = strategy.match(terms)
    values.update({f"t{i}": strategy.json_key(term) for i, term in enumerate(terms)})
    return values


def search_statement(
    dialect: sa.Engine | sa.Connection | sa.Dialect | str,
    namespace: str,
    terms: Sequence[str],
    filters: Filters,
    limit: int,
    with_vectors: bool,
) -> tuple[sa.Select[Any], dict[str, Any]]:
    """The one statement of a search: chunks of ``namespace`` holding any of the index
    ``terms``, best full-text rank first, with what BM25 needs to score them.

    Each row: position, text, length, source, metadata, then how often each term occurs in
    the chunk (read from ``term_counts`` by the database, null for none), then — with
    ``with_vectors`` — embedding, embedder and dimension; last the namespace's chunk count
    and total length, each term's frequency in the namespace (null for none) and the
    namespace's settings version (null: never configured), the same on every row. Built
    anew on every call (``SearchStatements`` keeps them compiled).
    """
    strategy = strategy_of(dialect)
    template = search_template(strategy, len(terms), filter_shape(filters), with_vectors)
    return template, search_values(strategy, namespace, terms, filters, limit)


# What a compiled search statement depends on: term count, filter kinds, with vectors.
SearchShape = tuple[int, tuple[tuple[str, ...], ...], bool]


# Compiled search statements one engine keeps: one per shape (term count, filter kinds,
# vectors), least recently used dropped first. A compiled statement is its SQL text and
# parameter converters (tens of kilobytes at 64 terms), so the cache stays a few megabytes.
MAX_CACHED_SEARCHES: Final = 128


class SearchStatements:
    """``engine``'s compiled search statements, at most ``size`` (least recently used
    dropped): each shape is built and compiled once, not per search.

    Thread-safe: a search may be planned in a worker thread (``AsyncKnowledgeBase``).
    """

    def __init__(self, engine: sa.Engine, size: int = MAX_CACHED_SEARCHES) -> None:
        self._engine = engine
        self._strategy = strategy_of(engine)
        self._size = size
        self._lock = threading.Lock()
        self._compiled: OrderedDict[SearchShape, DirectStatement] = OrderedDict()

    def __len__(self) -> int:
        return len(self._compiled)

    @property
    def size(self) -> int:
        """The most compiled statements kept."""
        return self._size

    @property
    def strategy(self) -> KnowledgeStrategy:
        """The engine's knowledge strategy, which the statements are built for."""
        return self._strategy

    def compiled(self, shape: SearchShape) -> DirectStatement | None:
        """The statement of ``shape`` if it is compiled already (``None``: not yet)."""
        with self._lock:
            found = self._compiled.get(shape)
            if found is not None:
                self._compiled.move_to_end(shape)
            return found

    def get(self, shape: SearchShape) -> DirectStatement:
        """The compiled statement of ``shape`` (built and compiled on first need)."""
        with self._lock:
            found = self._compiled.get(shape)
            if found is not None:
                self._compiled.move_to_end(shape)
                return found
        # Compiled outside the lock: two threads may both compile a new shape, and one wins.
        term_count, filters, with_vectors = shape
        template = search_template(self._strategy, term_count, filters, with_vectors)
        compiled = DirectStatement(self._engine, template)
        with self._lock:
            self._compiled[shape] = compiled
            self._compiled.move_to_end(shape)
            while len(self._compiled) > self._size:
                self._compiled.popitem(last=False)
        return compiled


@dataclass(frozen=True)
class SearchPlan:
    """One search, ready to run: ``rows`` of ``statement`` (one, in autocommit), then
    ``finish``. ``statement`` is compiled already: running it builds nothing.

    ``terms`` are index terms (``contextstore.core.tokens.index_term`` of ``query_terms``); an
    empty plan (no term, ``top_k <= 0``) has no statement and finishes as ``[]``.
    """

    statement: tuple[DirectStatement, dict[str, Any]] | None
    terms: tuple[str, ...]
    top_k: int
    parameters: RankingParameters
    query_vector: NDArray[np.float32] | None
    embedder: str | None
    # The settings version the query was analysed for, the analyzer's query term weights
    # (``None``: each term once) and the search's arguments, to plan again when stale.
    settings_version: int = 0
    weights: Mapping[str, int] | None = None
    request: tuple[Any, ...] = ()

    def stale(self, rows: Sequence[Sequence[Any]]) -> bool:
        """Whether ``rows`` come from an index built for other settings than the plan's."""
        return bool(rows) and int(rows[0][-1] or 0) != self.settings_version

    def finish(self, rows: Sequence[Sequence[Any]]) -> list[Chunk]:
        """Rank the rows ``statement`` returned into at most ``top_k`` chunks."""
        read = self.candidates(rows)
        if read is None:
            return []
        candidates, statistics = read
        return rank(
            candidates,
            self.terms,
            statistics,
            self.parameters,
            self.top_k,
            self.query_vector,
            self.weights,
        )

    def candidates(
        self, rows: Sequence[Sequence[Any]]
    ) -> tuple[list[Candidate], CorpusStatistics] | None:
        """The rows as candidates, with the namespace's statistics (``None``: nothing)."""
        if self.statement is None or not rows:
            return None
        width = len(self.terms)
        statistics_at = 5 + width + (3 if self.query_vector is not None else 0)
        count, total_length, *frequencies = rows[0][statistics_at:-1]
        if count is None:  # no statistics row: the namespace has never held a document
            return None
        statistics = CorpusStatistics(
            count=int(count),
            total_length=int(total_length),
            frequencies={
                term: int(frequency)
                for term, frequency in zip(self.terms, frequencies, strict=True)
                if frequency is not None
            },
        )
        candidates = []
        for row in rows:
            try:
                candidates.append(self._candidate(row))
            except UnreadableRowError as error:
                DOCUMENT_WARNINGS.skipped(printable(row[3]), error)
        return candidates, statistics

    def _candidate(self, row: Sequence[Any]) -> Candidate:
        position, text, length, source, metadata = row[:5]
        width = len(self.terms)
        # A count typed by hand that cannot be read skips the chunk for queries of its term,
        # as the local index does (``index.snapshot_from_rows``).
        counts = {
            term: read_count(count)
            for term, count in zip(self.terms, row[5 : 5 + width], strict=True)
            if count is not None
        }
        vector = None
        if self.query_vector is not None:
            embedding, embedder, dimension = row[5 + width : 8 + width]
            # A chunk embedded by another embedder (or none) ranks lexically: cosine 0.
            usable = embedder == self.embedder and dimension == self.query_vector.shape[0]
            if embedding is not None and usable:
                vector = np.frombuffer(embedding, dtype="<f4").astype(np.float32)
        return Candidate(
            text=check_text("text", text),
            source=check_text("source", source),
            position=int(position),
            length=int(length),
            counts=counts,
            metadata=check_json("metadata", read_metadata(metadata)),
            vector=vector,
        )


def read_metadata(value: Any) -> dict[str, Any]:
    """A document's metadata as fetched: PostgreSQL's already decoded, SQLite's JSON text.

    ``UnreadableRowError`` when it is not a JSON object (typed by hand in SQL).
    """
    return _json_object("metadata", value)


def read_term_counts(value: Any) -> dict[str, int]:
    """A chunk's ``term_counts`` as fetched, each count checked (``check_count``)."""
    counts = _json_object("term_counts", value)
    return {str(term): check_count(count) for term, count in counts.items()}


def _json_object(column: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as error:
            shown = shortened(printable(str(value)))
            raise UnreadableRowError(column, shown, "is not JSON") from error
    if not isinstance(value, dict):
        raise UnreadableRowError(column, shortened(printable(str(value))), "is not a JSON object")
    return value


def plan_search(
    statements: SearchStatements,
    namespace: str,
    terms: Sequence[str],
    top_k: int,
    filters: Filters,
    *,
    candidate_limit: int,
    parameters: RankingParameters,
    query_vector: NDArray[np.float32] | None = None,
    embedder: str | None = None,
    compile_up_to: int | None = None,
    settings_version: int = 0,
    weights: Mapping[str, int] | None = None,
    request: tuple[Any, ...] = (),
) -> SearchPlan | None:
    """The compiled statement of one search for index ``terms`` (from ``statements``, built
    on first need) and how to rank what it returns. With ``compile_up_to``: ``None`` instead
    of building a shape of more terms than that."""
    terms = tuple(terms)
    statement: tuple[DirectStatement, dict[str, Any]] | None = None
    if terms and top_k > 0:
        shape = (len(terms), filter_shape(filters), query_vector is not None)
        compiled = statements.compiled(shape)
        if compiled is None:
            if compile_up_to is not None and len(terms) > compile_up_to:
                return None
            compiled = statements.get(shape)
        values = search_values(statements.strategy, namespace, terms, filters, candidate_limit)
        statement = compiled, values
    return SearchPlan(
        statement,
        terms,
        top_k,
        parameters,
        query_vector,
        embedder,
        settings_version,
        weights,
        request,
    )
