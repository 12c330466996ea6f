"""The knowledge base's vector candidates, found by the database.

A hybrid or vector search asks the database for two small sets of chunk ids among the chunks
its namespace and filters allow: the ``top_k + MARGIN`` nearest to the query (cosine) and the
``FARTHEST`` farthest (whose cosine is the floor hybrid fusion normalises by). Then it reads
those chunks by primary key and ``contextstore.core.hybrid.rank_union`` ranks them with the
lexical candidates, recomputing every cosine in Python from the stored float32 bytes, so the
scores are ``InMemoryRetriever``'s to the last bit whichever database picked the ids.

Where the ids come from (``vector_backend``):

* ``sqlite-vec``: SQLite orders by ``vec_distance_cosine`` over the stored bytes (an exact
  scan inside the database, filters applied in the same statement).
* ``pgvector``: PostgreSQL orders by ``<=>`` over the generated ``embedding_vector`` column
  (migration 0018). Through the dimension's partial HNSW index by default, with
  ``hnsw.ef_search`` set per query (``SET LOCAL``, through ``set_config``) from ``top_k`` and
  iterative scans so filters cannot starve it; an exact scan with ``exact=True``.
* ``exact scan``: neither is there; the allowed chunks' vectors are read and scored in
  Python.

The nearest set carries ``MARGIN`` more than ``top_k`` because the database computes
distances in its own float arithmetic: two chunks a rounding error apart may come out in the
other order there, and the margin keeps both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.knowledge.filters import (
    Filters,
    filter_conditions,
    filter_parameters,
    filter_shape,
)
from contextstore.backends.sql.knowledge.queries import SearchPlan, read_metadata, read_term_counts
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.strategy import (
    EXACT_SCAN,
    PGVECTOR,
    SQLITE_VEC,
    KnowledgeStrategy,
)
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS
from contextstore.backends.sql.unreadable import (
    DOCUMENT_WARNINGS,
    UnreadableRowError,
    check_json,
    check_text,
    printable,
)
from contextstore.core.compose import Chunk
from contextstore.core.hybrid import UnionMode, rank_union, similarities
from contextstore.core.ranking import Candidate, CorpusStatistics, RankingParameters

__all__ = [
    "EXACT_SCAN",
    "FARTHEST",
    "MARGIN",
    "PGVECTOR",
    "SQLITE_VEC",
    "HybridPlan",
    "VectorQuery",
    "describe",
    "ef_search",
    "finish_hybrid",
    "hnsw_dimensions",
    "plan_hybrid",
    "vector_backend",
    "vector_candidates",
]

MARGIN: Final = 8
FARTHEST: Final = 4
# HNSW's candidate list per query: at 100k chunks 100 gave recall@10 0.94 against the exact
# scan, 200 gave 0.98 in the same time (benchmarks/vectors.py, decision 0088); the upper
# bound is pgvector's own.
EF_SEARCH_MIN: Final = 200
EF_SEARCH_MAX: Final = 1000


@dataclass(frozen=True)
class VectorQuery:
    """What one search asks of the database's vectors: the namespace's chunks embedded by
    ``embedder`` that ``filters`` allow, nearest ``count`` to ``unit`` (and in ``hybrid``
    mode the farthest ones); ``exact`` refuses an approximate index."""

    namespace: str
    embedder: str
    unit: NDArray[np.float32]
    filters: Filters
    count: int
    mode: str
    exact: bool

    @property
    def floor(self) -> bool:
        """Whether the farthest chunks are wanted: hybrid fusion's cosine floor."""
        return self.mode == "hybrid"


def ef_search(count: int) -> int:
    """``hnsw.ef_search`` for ``count`` nearest chunks: four times as many, within bounds."""
    return max(EF_SEARCH_MIN, min(EF_SEARCH_MAX, 4 * count))


def vector_backend(connection: sa.Connection) -> str:
    """Which way this database finds vector candidates (see the module docstring)."""
    return strategy_of(connection).vector_backend(connection)


def hnsw_dimensions(connection: sa.Connection) -> tuple[int, ...]:
    """The dimensions with an HNSW index on ``chunks`` (PostgreSQL with pgvector)."""
    return strategy_of(connection).hnsw_dimensions(connection)


def _allowed(strategy: KnowledgeStrategy, query: VectorQuery) -> list[sa.ColumnElement[bool]]:
    return [
        CHUNKS.c.namespace == sa.bindparam("ns"),
        *filter_conditions(strategy, filter_shape(query.filters)),
    ]


def _usable(query: VectorQuery) -> sa.ColumnElement[bool]:
    return sa.and_(
        CHUNKS.c.embedder == sa.bindparam("embedder"),
        CHUNKS.c.dimension == sa.literal_column(str(query.unit.shape[0])),
    )


def _ids_in_database(
    connection: sa.Connection, query: VectorQuery, values: dict[str, Any]
) -> tuple[list[int], list[int]]:
    strategy = strategy_of(connection)
    joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
    allowed = _allowed(strategy, query)
    dimension = query.unit.shape[0]
    nearest = None if query.exact else strategy.index_distance(dimension, "q")
    if nearest is not None:
        strategy.tune_index_search(connection, ef_search(query.count))
        near = sa.select(CHUNKS.c.id).select_from(joined).where(*allowed, _usable(query))
        near = near.order_by(nearest).limit(query.count)
    else:
        distance = strategy.cosine_distance("q")
        near = (
            sa.select(CHUNKS.c.id)
            .select_from(joined)
            .where(*allowed, _usable(query))
            .order_by(
                distance,
                dialect_of(connection).by_code_point(DOCUMENTS.c.source),
                CHUNKS.c.position,
            )
            .limit(query.count)
        )
    near_ids = [int(i) for i in connection.execute(near, values).scalars()]
    far_ids: list[int] = []
    if query.floor:
        # The nearest neighbours of the negated query are the farthest from it.
        farthest = None if nearest is None else strategy.index_distance(dimension, "minus_q")
        if farthest is not None:
            far = sa.select(CHUNKS.c.id).select_from(joined).where(*allowed, _usable(query))
            far = far.order_by(farthest).limit(FARTHEST)
        else:
            # A chunk without a usable vector has cosine 0: distance 1.
            far_distance = sa.case((_usable(query), strategy.cosine_distance("q")), else_=1.0)
            far = (
                sa.select(CHUNKS.c.id)
                .select_from(joined)
                .where(*allowed)
                .order_by(far_distance.desc())
                .limit(FARTHEST)
            )
        far_ids = [int(i) for i in connection.execute(far, values).scalars()]
    return near_ids, far_ids


def _ids_in_python(
    connection: sa.Connection, query: VectorQuery, values: dict[str, Any]
) -> tuple[list[int], list[int]]:
    """Every allowed chunk's vector read and scored here: the exact scan without an index."""
    statement = (
        sa.select(
            CHUNKS.c.id,
            DOCUMENTS.c.source,
            CHUNKS.c.position,
            CHUNKS.c.embedding,
            CHUNKS.c.embedder,
            CHUNKS.c.dimension,
        )
        .select_from(CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id))
        .where(*_allowed(strategy_of(connection), query))
    )
    rows = connection.execute(statement, values).all()
    if not rows:
        return [], []
    dimension = query.unit.shape[0]
    usable = np.fromiter(
        (r[3] is not None and r[4] == query.embedder and r[5] == dimension for r in rows),
        dtype=bool,
        count=len(rows),
    )
    picked = np.flatnonzero(usable)
    # A chunk without a usable vector has cosine 0 (it only matters for the floor).
    scores = np.zeros(len(rows), dtype=np.float64)
    near: list[int] = []
    if picked.size:
        matrix = np.frombuffer(b"".join(rows[int(i)][3] for i in picked), dtype="<f4")
        scores[picked] = np.einsum("ij,j->i", matrix.reshape(-1, dimension), query.unit)
        wanted = min(query.count, int(picked.size))
        threshold = np.partition(scores[picked], picked.size - wanted)[picked.size - wanted]
        best = sorted(
            (int(i) for i in picked[scores[picked] >= threshold]),
            key=lambda i: (-scores[i], str(rows[i][1]), int(rows[i][2])),
        )
        near = [int(rows[i][0]) for i in best[: query.count]]
    far: list[int] = []
    if query.floor:
        far = [int(rows[int(i)][0]) for i in np.argsort(scores, kind="stable")[:FARTHEST]]
    return near, far


def _chunks_by_id(
    connection: sa.Connection, ids: Sequence[int], query: VectorQuery
) -> dict[int, Candidate]:
    strategy = strategy_of(connection)
    metadata = strategy.fetched_json(DOCUMENTS.c["metadata"])
    counts = strategy.fetched_json(CHUNKS.c.term_counts)
    statement = (
        sa.select(
            CHUNKS.c.id,
            CHUNKS.c.position,
            CHUNKS.c.text,
            CHUNKS.c.length,
            DOCUMENTS.c.source,
            metadata,
            counts,
            CHUNKS.c.embedding,
            CHUNKS.c.embedder,
            CHUNKS.c.dimension,
        )
        .select_from(CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id))
        .where(CHUNKS.c.id.in_(list(ids)))
    )
    found: dict[int, Candidate] = {}
    for row in connection.execute(statement):
        try:
            found[int(row[0])] = _candidate(row, query)
        except UnreadableRowError as error:
            DOCUMENT_WARNINGS.skipped(printable(row[4]), error)
    return found


def _candidate(row: Sequence[Any], query: VectorQuery) -> Candidate:
    _, position, text, length, source, metadata, counts, embedding, embedder, dimension = row
    vector = None
    # A chunk embedded by another embedder (or none) has cosine 0, as in lexical ranking.
    if embedding is not None and embedder == query.embedder and dimension == query.unit.size:
        vector = np.frombuffer(embedding, dtype="<f4").astype(np.float32)
    return Candidate(
        text=check_text("text", text),
        source=check_text("source", source),
        position=int(position),
        length=int(length),
        counts=read_term_counts(counts),
        metadata=check_json("metadata", read_metadata(metadata)),
        vector=vector,
    )


def vector_candidates(
    connection: sa.Connection, backend: str, query: VectorQuery
) -> tuple[list[Candidate], float]:
    """The nearest allowed chunks as candidates, and the cosine floor (0 without ``floor``).

    A candidate's vector is ``None`` unless it comes from ``query.embedder``.
    """
    strategy = strategy_of(connection)
    values: dict[str, Any] = {"ns": query.namespace, "embedder": query.embedder}
    values.update(filter_parameters(strategy, query.filters))
    values.update(strategy.vector_parameters(query.unit))
    if backend == EXACT_SCAN:
        near_ids, far_ids = _ids_in_python(connection, query, values)
    else:
        near_ids, far_ids = _ids_in_database(connection, query, values)
    chunks = _chunks_by_id(connection, sorted(set(near_ids) | set(far_ids)), query)
    near = [chunks[i] for i in near_ids if i in chunks]
    far = [chunks[i] for i in far_ids if i in chunks]
    floor = float(similarities(far, query.unit).min()) if far else 0.0
    return near, floor


@dataclass(frozen=True)
class HybridPlan:
    """A hybrid or vector search, ready to run: the lexical plan (no statement in ``vector``
    mode, or without query terms) and what to ask of the vectors."""

    lexical: SearchPlan
    vectors: VectorQuery
    mode: UnionMode


def plan_hybrid(
    search: Callable[..., SearchPlan | None], terms: tuple[str, ...], vectors: VectorQuery
) -> HybridPlan | None:
    """The plan of a hybrid or vector search: ``search`` (the lexical planner) for ``terms``
    with vectors fetched (none in ``vector`` mode), then ``vectors``; ``None`` when the
    lexical planner declines to compile in place."""
    mode: UnionMode = "vector" if vectors.mode == "vector" else "hybrid"
    lexical = search(terms=() if mode == "vector" else terms, query_vector=vectors.unit)
    return None if lexical is None else HybridPlan(lexical, vectors, mode)


def finish_hybrid(
    plan: HybridPlan,
    lexical_rows: Sequence[Sequence[Any]],
    vectors: Callable[[VectorQuery], tuple[list[Candidate], float]],
    parameters: RankingParameters,
) -> list[Chunk]:
    """Rank the lexical rows and the vector candidates together (``rank_union``)."""
    read = plan.lexical.candidates(lexical_rows) if lexical_rows else None
    candidates, statistics = read if read is not None else ([], CorpusStatistics(0, 0))
    near: list[Candidate] = []
    floor = 0.0
    # A query embedded to zeros is similar to nothing: every cosine is 0, as in memory.
    if plan.vectors.unit.any():
        near, floor = vectors(plan.vectors)
    return rank_union(
        [*candidates, *near],
        plan.lexical.terms,
        statistics,
        parameters,
        plan.lexical.top_k,
        plan.vectors.unit,
        plan.mode,
        floor,
        plan.lexical.weights,
    )


def describe(connection: sa.Connection) -> str:
    """How vector searches run on this database, for ``contextstore db check``."""
    backend = vector_backend(connection)
    if backend == PGVECTOR:
        dimensions = ", ".join(str(d) for d in hnsw_dimensions(connection)) or "none"
        return f"pgvector: HNSW indexes for dimensions {dimensions}, an exact scan for others"
    if backend == SQLITE_VEC:
        return "sqlite-vec: exact scan inside SQLite"
    return f"exact scan in Python ({strategy_of(connection).missing_vectors})"
