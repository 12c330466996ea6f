"""The knowledge base on PostgreSQL: a GIN-indexed ``tsvector``, JSONB, pgvector's HNSW."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import psycopg

from contextstore.backends.sql.knowledge.filters import filter_conditions
from contextstore.backends.sql.knowledge.strategy import (
    EXACT_SCAN,
    PGVECTOR,
    ChunkUpdates,
    KnowledgeStrategy,
)
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS
from contextstore.core.knowledge import FilterValue

__all__ = ["PG_BATCH", "PostgreSQLKnowledge"]

# Chunks per UPDATE when reindexing (at most 7 parameters each, well under PostgreSQL's 65,535).
PG_BATCH: Final = 5000

# The generated tsvector column on chunks (made by the migration; not a model).
_SEARCH: Final[sa.ColumnElement[Any]] = sa.literal_column("chunks.search")
_SIMPLE: Final[sa.ColumnElement[Any]] = sa.literal_column("'simple'::regconfig")
# pgvector's generated column on chunks (migration 0018; not a model).
_VECTOR_COLUMN: Final[sa.ColumnElement[Any]] = sa.literal_column("chunks.embedding_vector")


class _Vector(sa.types.UserDefinedType[Any]):
    """pgvector's type, with or without its dimension (only the casts below use it)."""

    cache_ok = True

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension

    def get_col_spec(self, **_kw: Any) -> str:
        return "vector" if self.dimension is None else f"vector({self.dimension})"


class PostgreSQLKnowledge(KnowledgeStrategy):
    missing_vectors = "the pgvector extension is missing"
    # Its statistics triggers run per statement, and each run leaves a version of every
    # statistics row it updates that the next run walks until the commit: statements of one
    # batch (500 documents) made their work grow with the square of the import.
    chunks_per_statement = 10_000

    def fetched_json(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        # As text: JSONB holds valid JSON only, but not all of it decodes in Python (a number
        # of more than 4,300 digits, nesting deeper than the recursion limit), and psycopg's
        # decoding would fail the statement.
        return sa.cast(column, sa.Text())

    def json_key(self, key: str) -> str:
        return key

    def bound_filter_values(self, options: Sequence[FilterValue]) -> dict[int, Any]:
        return {j: json.dumps(option) for j, option in enumerate(options)}

    def metadata_equals(self, i: int, j: int, kind: str) -> sa.ColumnElement[bool]:
        key = sa.bindparam(f"fk{i}", type_=sa.Text())
        # Bound as text and cast, so the JSON is encoded exactly once.
        value = sa.cast(sa.bindparam(f"fv{i}_{j}", type_=sa.Text()), postgresql.JSONB)
        return DOCUMENTS.c["metadata"].op("->")(key) == value

    def term_count(self, i: int) -> sa.ColumnElement[Any]:
        # The JSON text, not a cast to integer: a count typed by hand that is no integer
        # would fail the whole statement, where the reader skips only its chunk.
        key = sa.bindparam(f"t{i}", type_=sa.Text())
        return sa.cast(CHUNKS.c.term_counts.op("->", return_type=postgresql.JSONB)(key), sa.Text())

    def match(self, terms: Sequence[str]) -> str:
        # Index terms are letters and digits only (contextstore.core.tokens.index_term): quoting
        # each keeps to_tsquery's operators out of them.
        return " | ".join(f"'{term}'" for term in terms)

    def search_select(
        self, columns: Sequence[sa.ColumnElement[Any]], shape: tuple[tuple[str, ...], ...]
    ) -> sa.Select[Any]:
        # Each match's document is read by its primary key, in a LATERAL subquery that the
        # planner cannot flatten (OFFSET 0): a plain join let it hash-join all of the
        # namespace's documents once its estimate of the matches grew with the table.
        document = (
            sa.select(DOCUMENTS.c.source, DOCUMENTS.c["metadata"])
            .where(DOCUMENTS.c.id == CHUNKS.c.document_id, *filter_conditions(self, shape))
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
                self.fetched_json(document.c["metadata"]),
                *columns,
            )
            .select_from(CHUNKS.join(document, sa.true()))
            .where(_SEARCH.op("@@")(query), CHUNKS.c.namespace == sa.bindparam("ns"))
            .order_by(sa.func.ts_rank(_SEARCH, query).desc(), CHUNKS.c.id)
            .limit(sa.bindparam("limit", type_=sa.Integer()))
        )

    def ids_condition(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        return column == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger)))

    def ids_parameter(self, ids: list[int]) -> list[int] | str:
        return ids

    def vector_backend(self, connection: sa.Connection) -> str:
        column = connection.exec_driver_sql(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('chunks') "
            "AND attname = 'embedding_vector' AND NOT attisdropped"
        ).first()
        return EXACT_SCAN if column is None else PGVECTOR

    def hnsw_dimensions(self, connection: sa.Connection) -> tuple[int, ...]:
        names = connection.exec_driver_sql(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = to_regclass('chunks') "
            "AND a.amname = 'hnsw'"
        ).scalars()
        prefix = "ix_chunks_embedding_"
        return tuple(sorted(int(n[len(prefix) :]) for n in names if n.startswith(prefix)))

    def vector_parameters(self, unit: NDArray[np.float32]) -> dict[str, Any]:
        return {"q": _text(unit), "minus_q": _text(-unit)}

    def cosine_distance(self, parameter: str) -> sa.ColumnElement[Any]:
        # A zero vector's distance is NaN.
        vector = sa.cast(sa.bindparam(parameter, type_=sa.Text()), _Vector())
        raw = _VECTOR_COLUMN.op("<=>")(vector)
        return sa.func.coalesce(sa.func.nullif(raw, sa.literal_column("'NaN'::float8")), 1.0)

    def index_distance(self, dimension: int, parameter: str) -> sa.ColumnElement[Any] | None:
        typed = _Vector(dimension)
        return sa.cast(_VECTOR_COLUMN, typed).op("<=>")(
            sa.cast(sa.bindparam(parameter, type_=sa.Text()), typed)
        )

    def tune_index_search(self, connection: sa.Connection, ef_search: int) -> None:
        # Both settings local to this transaction, in one round trip; iterative scans (pgvector
        # 0.8 and later) only where the server knows them, so filters cannot starve the index.
        connection.exec_driver_sql(
            f"SELECT set_config('hnsw.ef_search', '{ef_search}', true), "
            "CASE WHEN current_setting('hnsw.iterative_scan', true) IS NOT NULL "
            "THEN set_config('hnsw.iterative_scan', 'strict_order', true) END"
        )

    def insert_rows(
        self,
        connection: sa.Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        returning: tuple[sa.Column[Any], ...],
    ) -> list[Any]:
        """One ``INSERT … SELECT`` from ``unnest`` of one array per column
        (``_array_insert``), sent in binary through psycopg: a multi-row ``VALUES`` of
        thousands of placeholders is parsed anew by psycopg on every call, and an array of
        text in text format is quoted element by element in Python, each costing more than
        the server's work (decision 0097). The values go through the columns' own bind
        processing, as in any other statement."""
        if connection.dialect.driver != "psycopg":
            return list(connection.execute(sa.insert(table).returning(*returning), list(rows)))
        names = tuple(rows[0])
        arrays: dict[str, list[Any]] = {}
        for name in names:
            process = table.c[name].type._cached_bind_processor(connection.dialect)
            values = [row[name] for row in rows]
            arrays[name] = values if process is None else [process(value) for value in values]
        return list(connection.exec_driver_sql(_array_insert(table, names, returning), arrays))

    def update_chunks(
        self, connection: sa.Connection, names: tuple[str, ...], group: ChunkUpdates
    ) -> None:
        # The triggers on chunks run once per statement: one UPDATE … FROM (VALUES …) per
        # batch instead of one UPDATE per chunk, which fired them once per chunk.
        columns = [
            sa.column("chunk_id", sa.BigInteger()),
            *(sa.column(n, CHUNKS.c[n].type) for n in names),
        ]
        for start in range(0, len(group), PG_BATCH):
            batch = group[start : start + PG_BATCH]
            values = sa.values(*columns, name="rewritten").data(
                [(chunk_id, *(row[name] for name in names)) for chunk_id, row in batch]
            )
            connection.execute(
                sa.update(CHUNKS)
                .where(CHUNKS.c.id == values.c.chunk_id)
                # Cast: a VALUES list of nulls only (vectors dropped) has no type of its own.
                .values({name: sa.cast(values.c[name], CHUNKS.c[name].type) for name in names})
            )


@functools.cache
def _array_insert(
    table: sa.Table, names: tuple[str, ...], returning: tuple[sa.Column[Any], ...]
) -> str:
    """``INSERT INTO table (names) SELECT … FROM unnest(%(name)b, …) WITH ORDINALITY ORDER
    BY ordinality RETURNING …``: the arrays' elements as rows, numbered (and so given their
    ids) in the arrays' order; every array a binary parameter (psycopg's ``%b``). A JSON
    column's array is ``jsonb[]``, a string column's ``text[]`` (a cast to ``varchar(n)[]``
    would cut a longer value, which the column itself refuses)."""
    arrays = []
    for name in names:
        column_type = table.c[name].type
        if isinstance(column_type, sa.JSON):
            column_type = postgresql.JSONB()
        elif isinstance(column_type, sa.String):
            column_type = sa.Text()
        arrays.append(sa.bindparam(name, type_=postgresql.ARRAY(column_type)))
    rows = sa.func.unnest(*arrays).table_valued(*names, with_ordinality="ordinality")
    rows = rows.render_derived()
    select = sa.select(*(rows.c[name] for name in names)).order_by(rows.c.ordinality)
    statement = sa.insert(table).from_select(list(names), select).returning(*returning)
    compiled = statement.compile(dialect=psycopg.dialect())  # type: ignore[no-untyped-call]
    return _BINARY_PLACEHOLDER.sub(r"%(\1)b", str(compiled))


_BINARY_PLACEHOLDER: Final = re.compile(r"%\((\w+)\)s")


def _text(unit: NDArray[np.float32]) -> str:
    # repr of a float32 as a Python float is exact, and pgvector parses it back to the
    # same float32.
    return "[" + ",".join(repr(float(x)) for x in cast(Any, unit)) + "]"
