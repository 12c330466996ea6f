"""The knowledge base's statements, and the pure step that turns their rows into chunks.

Nothing here executes anything: each function builds a SQLAlchemy statement, or reads rows a
caller fetched. A search's statement is compiled once per shape and kept
(``SearchStatements``, bounded); ``KnowledgeBase`` sends it on a pooled driver connection
(``DirectStatement``), from a plain thread or through the async engine's greenlet bridge, and
hands the rows to the same ``SearchPlan.finish``, so a search has one definition whichever
driver does the I/O. Building and compiling happen in ``plan``, never while rows are awaited.

A search is one statement, run in autocommit: at most ``candidate_limit`` candidate chunks
found through the full-text index (FTS5 ``MATCH`` on SQLite, the GIN-indexed ``@@`` on
PostgreSQL), best full-text rank first, with the metadata filters applied in SQL; each row
also carries the namespace's statistics and the frequencies of the query's terms, read by
uncorrelated scalar subqueries (primary-key lookups of ``knowledge_stats`` and
``knowledge_terms``, evaluated once per statement). One statement reads one snapshot, so the
statistics always describe the corpus the candidates come from, without a transaction around
it. Nothing scans ``chunks``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy.dialects import postgresql

from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.knowledge.settings import settings_version_column
from contextstore.backends.sql.models import (
    ChunkRow,
    DocumentRow,
    KnowledgeStatsRow,
    KnowledgeTermRow,
)
from contextstore.backends.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_json,
    check_text,
    printable,
)
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import FilterValue
from contextstore.core.ranking import Candidate, CorpusStatistics, RankingParameters, rank

DOCUMENTS: Final = cast(sa.Table, DocumentRow.__table__)
CHUNKS: Final = cast(sa.Table, ChunkRow.__table__)
STATS: Final = cast(sa.Table, KnowledgeStatsRow.__table__)
TERMS: Final = cast(sa.Table, KnowledgeTermRow.__table__)

# SQLite's FTS5 table (made by the migration; not a model).
_FTS: Final = sa.table("chunks_fts", sa.column("rowid"), sa.column("rank"))
# PostgreSQL's generated tsvector column on chunks (made by the migration; not a model).
_SEARCH: Final[sa.ColumnElement[Any]] = sa.literal_column("chunks.search")
_SIMPLE: Final[sa.ColumnElement[Any]] = sa.literal_column("'simple'::regconfig")


def generation_statement(namespace: str) -> sa.Select[Any]:
    """The namespace's knowledge generation: one row, or none before its first document."""
    return sa.select(STATS.c.generation).where(STATS.c.namespace == namespace)


def generation_from(row: Sequence[Any] | None) -> int:
    """The generation ``generation_statement`` returned (0 when the namespace has no row)."""
    return 0 if row is None else int(row[0])


def lock_namespace_statement(dialect: str, namespace: str) -> sa.Insert:
    """Create the namespace's statistics row if missing and lock it until commit.

    Every knowledge write starts with it, so writers of one namespace take their turns (on
    SQLite they already do) and each sees what the previous one committed.
    """
    insert = postgresql.insert if dialect == "postgresql" else _sqlite_insert
    statement = insert(STATS).values(
        namespace=namespace, generation=0, document_count=0, chunk_count=0, total_length=0
    )
    return statement.on_conflict_do_update(
        index_elements=[STATS.c.namespace], set_={"generation": STATS.c.generation}
    )


def _sqlite_insert(table: sa.Table) -> Any:
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def _kind(option: FilterValue) -> str:
    if option is None:
        return "null"
    if isinstance(option, bool):
        return "true" if option else "false"
    return "text" if isinstance(option, str) else "number"


def filter_shape(
    filters: Mapping[str, tuple[FilterValue, ...]],
) -> tuple[tuple[str, ...], ...]:
    """What the SQL of ``filters`` depends on (their values are bound): the kinds of values."""
    return tuple(tuple(_kind(option) for option in options) for options in filters.values())


def filter_parameters(
    dialect: str, filters: Mapping[str, tuple[FilterValue, ...]]
) -> dict[str, Any]:
    """The bound values of ``filter_conditions``: each key, and each value to compare."""
    values: dict[str, Any] = {}
    for i, (key, options) in enumerate(filters.items()):
        values[f"fk{i}"] = key if dialect == "postgresql" else f'$."{key}"'
        for j, option in enumerate(options):
            if dialect == "postgresql":
                values[f"fv{i}_{j}"] = json.dumps(option)
            elif _kind(option) in ("text", "number"):
                values[f"fv{i}_{j}"] = option
    return values


def filter_conditions(
    dialect: str, shape: tuple[tuple[str, ...], ...]
) -> list[sa.ColumnElement[bool]]:
    """One condition per key: the document's metadata holds one of the allowed values.

    Compared as JSON values: numbers by value, a bool only with a bool, a string only with a
    string, ``None`` only with a present null (``contextstore.core.knowledge.validate_filters``).
    """
    conditions: list[sa.ColumnElement[bool]] = []
    for i, kinds in enumerate(shape):
        alternatives = [_equals(dialect, i, j, kind) for j, kind in enumerate(kinds)]
        conditions.append(sa.or_(*alternatives) if alternatives else sa.false())
    return conditions


def _equals(dialect: str, i: int, j: int, kind: str) -> sa.ColumnElement[bool]:
    metadata = DOCUMENTS.c["metadata"]
    key = sa.bindparam(f"fk{i}", type_=sa.Text())
    if dialect == "postgresql":
        # Bound as text and cast, so the JSON is encoded exactly once.
        value = sa.cast(sa.bindparam(f"fv{i}_{j}", type_=sa.Text()), postgresql.JSONB)
        return metadata.op("->")(key) == value
    json_type = sa.func.json_type(metadata, key)
    if kind in ("null", "true", "false"):
        return json_type == kind
    extracted = sa.func.json_extract(metadata, key)
    if kind == "text":
        return sa.and_(json_type == "text", extracted == sa.bindparam(f"fv{i}_{j}"))
    # Two comparisons, not ``IN``: an expanding parameter cannot be compiled once and kept.
    number = sa.or_(json_type == "integer", json_type == "real")
    return sa.and_(number, extracted == sa.bindparam(f"fv{i}_{j}"))


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
    dialect: str, term_count: int, shape: tuple[tuple[str, ...], ...], with_vectors: bool
) -> sa.Select[Any]:
    """The search statement of one shape, every value a bind parameter (``search_values``).

    Costly to build and compile (tens of milliseconds for 64 terms): ``SearchStatements``
    keeps each shape compiled, and nothing here runs on an event loop.
    """
    counts: list[sa.ColumnElement[Any]] = []
    for i in range(term_count):
        if dialect == "postgresql":
            text = CHUNKS.c.term_counts.op("->>")(sa.bindparam(f"t{i}", type_=sa.Text()))
            counts.append(sa.cast(text, sa.Integer()))
        else:
            path = sa.bindparam(f"t{i}", type_=sa.Text())
            counts.append(sa.func.json_extract(CHUNKS.c.term_counts, path))
    vectors = [CHUNKS.c.embedding, CHUNKS.c.embedder, CHUNKS.c.dimension] if with_vectors else []
    statistics = _statistics_columns(term_count)
    namespace = CHUNKS.c.namespace == sa.bindparam("ns")
    limit = sa.bindparam("limit", type_=sa.Integer())
    if dialect == "postgresql":
        # Each match's document is read by its primary key, in a LATERAL subquery that the
        # planner cannot flatten (OFFSET 0): a plain join let it hash-join all of the
        # namespace's documents once its estimate of the matches grew with the table.
        document = (
            sa.select(DOCUMENTS.c.source, DOCUMENTS.c["metadata"])
            .where(DOCUMENTS.c.id == CHUNKS.c.document_id, *filter_conditions(dialect, shape))
            .offset(sa.literal_column("0"))
            .lateral("document")
        )
        query = sa.func.to_tsquery(_SIMPLE, sa.bindparam("match", type_=sa.Text()))
        return (
            sa.select(
                CHUNKS.c.position,
                CHUNKS.c.text,
                CHUNKS.c.length,
                document.c.source,
                document.c["metadata"],
                *counts,
                *vectors,
                *statistics,
            )
            .select_from(CHUNKS.join(document, sa.true()))
            .where(_SEARCH.op("@@")(query), namespace)
            .order_by(sa.func.ts_rank(_SEARCH, query).desc(), CHUNKS.c.id)
            .limit(limit)
        )
    joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
    match = sa.bindparam("match", type_=sa.Text())
    return (
        sa.select(
            CHUNKS.c.position,
            CHUNKS.c.text,
            CHUNKS.c.length,
            DOCUMENTS.c.source,
            # SQLite's JSON text is decoded by ``read_metadata``: a row typed by hand that is not
            # JSON then skips its chunks instead of failing the whole search.
            sa.type_coerce(DOCUMENTS.c["metadata"], sa.String()),
            *counts,
            *vectors,
            *statistics,
        )
        .select_from(_FTS.join(joined, CHUNKS.c.id == _FTS.c.rowid))
        .where(
            sa.literal_column("chunks_fts").op("MATCH")(match),
            namespace,
            *filter_conditions(dialect, shape),
        )
        .order_by(_FTS.c.rank, CHUNKS.c.id)
        .limit(limit)
    )


def search_values(
    dialect: str,
    namespace: str,
    terms: Sequence[str],
    filters: Mapping[str, tuple[FilterValue, ...]],
    limit: int,
) -> dict[str, Any]:
    """The bound values of ``search_template`` for ``terms`` and ``filters``."""
    values: dict[str, Any] = {"ns": namespace, "limit": limit}
    values.update(filter_parameters(dialect, filters))
    values.update({f"w{i}": term for i, term in enumerate(terms)})
    if dialect == "postgresql":
        # Index terms are letters and digits only (contextstore.core.tokens.index_term): quoting
        # each keeps to_tsquery's operators out of them.
        values["match"] = " | ".join(f"'{term}'" for term in terms)
        values.update({f"t{i}": term for i, term in enumerate(terms)})
    else:
        values["match"] = " OR ".join(f'"{term}"' for term in terms)
        values.update({f"t{i}": f'$."{term}"' for i, term in enumerate(terms)})
    return values


def search_statement(
    dialect: str,
    namespace: str,
    terms: Sequence[str],
    filters: Mapping[str, tuple[FilterValue, ...]],
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
    template = search_template(dialect, len(terms), filter_shape(filters), with_vectors)
    return template, search_values(dialect, namespace, terms, filters, limit)


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
    def dialect(self) -> str:
        return str(self._engine.dialect.name)

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
        template = search_template(self._engine.dialect.name, term_count, filters, with_vectors)
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
        counts = {
            term: int(count)
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
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as error:
            raise UnreadableRowError("metadata", printable(str(value)), "is not JSON") from error
    if not isinstance(value, dict):
        raise UnreadableRowError("metadata", str(value), "is not a JSON object")
    return value


def plan_search(
    statements: SearchStatements,
    namespace: str,
    terms: Sequence[str],
    top_k: int,
    filters: Mapping[str, tuple[FilterValue, ...]],
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
        dialect = statements.dialect
        statement = compiled, search_values(dialect, namespace, terms, filters, candidate_limit)
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
