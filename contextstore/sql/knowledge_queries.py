"""The knowledge base's statements, and the pure step that turns their rows into chunks.

Nothing here executes anything: each function builds a SQLAlchemy statement, or reads rows a
caller fetched. ``KnowledgeBase`` runs them on a ``Connection``; an ``AsyncConnection`` can run
the very same statements and hand the rows to the very same ``SearchPlan.finish``, so a search
has one definition whichever driver does the I/O.

A search is three reads in one snapshot: the namespace's statistics, the frequencies of the
query's terms (``knowledge_terms``, one primary-key lookup each), and at most
``candidate_limit`` candidate chunks found through the full-text index (FTS5 ``MATCH`` on
SQLite, the GIN-indexed ``@@`` on PostgreSQL), best full-text rank first, with the metadata
filters applied in SQL. None of them scans ``chunks``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy.dialects import postgresql

from contextstore.compose import Chunk
from contextstore.knowledge import FilterValue
from contextstore.ranking import Candidate, CorpusStatistics, RankingParameters, rank
from contextstore.sql.models import ChunkRow, DocumentRow, KnowledgeStatsRow, KnowledgeTermRow

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


def statistics_statement(namespace: str) -> sa.Select[Any]:
    return sa.select(STATS.c.chunk_count, STATS.c.total_length).where(
        STATS.c.namespace == namespace
    )


def frequencies_statement(namespace: str, terms: Sequence[str]) -> sa.Select[Any]:
    return sa.select(TERMS.c.term, TERMS.c.frequency).where(
        TERMS.c.namespace == namespace, TERMS.c.term.in_(list(terms))
    )


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


def filter_conditions(
    dialect: str, filters: Mapping[str, tuple[FilterValue, ...]]
) -> list[sa.ColumnElement[bool]]:
    """One condition per key: the document's metadata holds one of the allowed values.

    Compared as JSON values: numbers by value, a bool only with a bool, a string only with a
    string, ``None`` only with a present null (``contextstore.knowledge.validate_filters``).
    """
    conditions: list[sa.ColumnElement[bool]] = []
    for key, options in filters.items():
        alternatives = [_equals(dialect, key, option) for option in options]
        conditions.append(sa.or_(*alternatives) if alternatives else sa.false())
    return conditions


def _equals(dialect: str, key: str, option: FilterValue) -> sa.ColumnElement[bool]:
    metadata = DOCUMENTS.c["metadata"]
    if dialect == "postgresql":
        # Bound as text and cast, so the JSON is encoded exactly once.
        value = sa.cast(sa.literal(json.dumps(option), sa.Text()), postgresql.JSONB)
        return metadata.op("->")(key) == value
    path = f'$."{key}"'
    kind = sa.func.json_type(metadata, path)
    extracted = sa.func.json_extract(metadata, path)
    if option is None:
        return kind == "null"
    if isinstance(option, bool):
        return kind == ("true" if option else "false")
    if isinstance(option, str):
        return sa.and_(kind == "text", extracted == option)
    return sa.and_(kind.in_(("integer", "real")), extracted == option)


def candidates_statement(
    dialect: str,
    namespace: str,
    terms: Sequence[str],
    filters: Mapping[str, tuple[FilterValue, ...]],
    limit: int,
    with_vectors: bool,
) -> sa.Select[Any]:
    """Chunks of ``namespace`` holding any of the index ``terms``, best full-text rank first."""
    columns = [
        CHUNKS.c.position,
        CHUNKS.c.text,
        CHUNKS.c.length,
        CHUNKS.c.term_counts,
        DOCUMENTS.c.source,
        DOCUMENTS.c["metadata"],
    ]
    if with_vectors:
        columns += [CHUNKS.c.embedding, CHUNKS.c.embedder, CHUNKS.c.dimension]
    joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
    conditions = [CHUNKS.c.namespace == namespace, *filter_conditions(dialect, filters)]
    if dialect == "postgresql":
        # Index terms are letters and digits only (contextstore.tokens.index_term): quoting
        # each keeps to_tsquery's operators out of them.
        query = sa.func.to_tsquery(_SIMPLE, " | ".join(f"'{term}'" for term in terms))
        return (
            sa.select(*columns)
            .select_from(joined)
            .where(_SEARCH.op("@@")(query), *conditions)
            .order_by(sa.func.ts_rank(_SEARCH, query).desc(), CHUNKS.c.id)
            .limit(limit)
        )
    match = " OR ".join(f'"{term}"' for term in terms)
    return (
        sa.select(*columns)
        .select_from(_FTS.join(joined, CHUNKS.c.id == _FTS.c.rowid))
        .where(sa.literal_column("chunks_fts").op("MATCH")(match), *conditions)
        .order_by(_FTS.c.rank, CHUNKS.c.id)
        .limit(limit)
    )


@dataclass(frozen=True)
class SearchPlan:
    """One search, ready to run: execute ``statements`` in one snapshot, then ``finish``.

    ``terms`` are index terms (``contextstore.tokens.index_term`` of ``query_terms``); an
    empty plan (no term, ``top_k <= 0``) has no statements and finishes as ``[]``.
    """

    statements: tuple[sa.Select[Any], ...]
    terms: tuple[str, ...]
    top_k: int
    parameters: RankingParameters
    query_vector: NDArray[np.float32] | None
    embedder: str | None

    def finish(self, results: Sequence[Sequence[Sequence[Any]]]) -> list[Chunk]:
        """Rank the rows of ``statements`` (in order) into at most ``top_k`` chunks."""
        if not self.statements:
            return []
        stats_rows, frequency_rows, candidate_rows = results
        if not stats_rows:
            return []
        count, total_length = (int(value) for value in stats_rows[0])
        statistics = CorpusStatistics(
            count=count,
            total_length=total_length,
            frequencies={str(term): int(frequency) for term, frequency in frequency_rows},
        )
        candidates = [self._candidate(row) for row in candidate_rows]
        return rank(
            candidates, self.terms, statistics, self.parameters, self.top_k, self.query_vector
        )

    def _candidate(self, row: Sequence[Any]) -> Candidate:
        position, text, length, counts, source, metadata = row[:6]
        vector = None
        if self.query_vector is not None:
            embedding, embedder, dimension = row[6:9]
            # A chunk embedded by another embedder (or none) ranks lexically: cosine 0.
            usable = embedder == self.embedder and dimension == self.query_vector.shape[0]
            if embedding is not None and usable:
                vector = np.frombuffer(embedding, dtype="<f4").astype(np.float32)
        return Candidate(
            text=text,
            source=source,
            position=int(position),
            length=int(length),
            counts=_json(counts),
            metadata=_json(metadata),
            vector=vector,
        )


def _json(value: Any) -> dict[str, Any]:
    # SQLite hands JSON back decoded by SQLAlchemy; a raw string only if typed by hand.
    return dict(json.loads(value) if isinstance(value, str | bytes) else value)


def plan_search(
    dialect: str,
    namespace: str,
    terms: Sequence[str],
    top_k: int,
    filters: Mapping[str, tuple[FilterValue, ...]],
    *,
    candidate_limit: int,
    parameters: RankingParameters,
    query_vector: NDArray[np.float32] | None = None,
    embedder: str | None = None,
) -> SearchPlan:
    """The statements of one search for index ``terms`` and how to rank what they return."""
    terms = tuple(terms)
    statements: tuple[sa.Select[Any], ...] = ()
    if terms and top_k > 0:
        statements = (
            statistics_statement(namespace),
            frequencies_statement(namespace, terms),
            candidates_statement(
                dialect, namespace, terms, filters, candidate_limit, query_vector is not None
            ),
        )
    return SearchPlan(statements, terms, top_k, parameters, query_vector, embedder)
