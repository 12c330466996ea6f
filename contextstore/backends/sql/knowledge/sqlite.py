"""The knowledge base on SQLite: FTS5, JSON1 functions, ``sqlite-vec`` when it is loaded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from contextstore.backends.sql.knowledge.filters import filter_conditions, filter_kind
from contextstore.backends.sql.knowledge.strategy import (
    EXACT_SCAN,
    SQLITE_VEC,
    ChunkUpdates,
    KnowledgeStrategy,
)
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS
from contextstore.core.knowledge import FilterValue

__all__ = ["SQLiteKnowledge"]

# SQLite's FTS5 table (made by the migration; not a model).
_FTS: Final = sa.table("chunks_fts", sa.column("rowid"), sa.column("rank"))


class SQLiteKnowledge(KnowledgeStrategy):
    missing_vectors = "install contextstore[vectors] for sqlite-vec"

    def fetched_json(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(column, sa.String())

    def json_key(self, key: str) -> str:
        return f'$."{key}"'

    def bound_filter_values(self, options: Sequence[FilterValue]) -> dict[int, Any]:
        # null, true and false are compared by ``json_type`` alone.
        return {
            j: option
            for j, option in enumerate(options)
            if filter_kind(option) in ("text", "number")
        }

    def metadata_equals(self, i: int, j: int, kind: str) -> sa.ColumnElement[bool]:
        metadata = DOCUMENTS.c["metadata"]
        key = sa.bindparam(f"fk{i}", type_=sa.Text())
        json_type = sa.func.json_type(metadata, key)
        if kind in ("null", "true", "false"):
            return json_type == kind
        extracted = sa.func.json_extract(metadata, key)
        if kind == "text":
            return sa.and_(json_type == "text", extracted == sa.bindparam(f"fv{i}_{j}"))
        # Two comparisons, not ``IN``: an expanding parameter cannot be compiled once and kept.
        number = sa.or_(json_type == "integer", json_type == "real")
        return sa.and_(number, extracted == sa.bindparam(f"fv{i}_{j}"))

    def term_count(self, i: int) -> sa.ColumnElement[Any]:
        path = sa.bindparam(f"t{i}", type_=sa.Text())
        # The JSON text, as PostgreSQL gives it: json_extract alone reads a JSON null as a
        # missing term (SQLite 3.38's -> gives the text directly, but not every system has it).
        present = sa.func.json_type(CHUNKS.c.term_counts, path).is_not(None)
        value = sa.func.json_quote(sa.func.json_extract(CHUNKS.c.term_counts, path))
        return sa.case((present, value), else_=sa.null())

    def match(self, terms: Sequence[str]) -> str:
        return " OR ".join(f'"{term}"' for term in terms)

    def search_select(
        self, columns: Sequence[sa.ColumnElement[Any]], shape: tuple[tuple[str, ...], ...]
    ) -> sa.Select[Any]:
        joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
        match = sa.bindparam("match", type_=sa.Text())
        return (
            sa.select(
                CHUNKS.c.position,
                CHUNKS.c.text,
                CHUNKS.c.length,
                DOCUMENTS.c.source,
                self.fetched_json(DOCUMENTS.c["metadata"]),
                *columns,
            )
            .select_from(_FTS.join(joined, CHUNKS.c.id == _FTS.c.rowid))
            .where(
                sa.literal_column("chunks_fts").op("MATCH")(match),
                CHUNKS.c.namespace == sa.bindparam("ns"),
                *filter_conditions(self, shape),
            )
            .order_by(_FTS.c.rank, CHUNKS.c.id)
            .limit(sa.bindparam("limit", type_=sa.Integer()))
        )

    def ids_condition(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        listed: sa.Select[Any] = sa.select(sa.literal_column("value")).select_from(
            sa.func.json_each(sa.bindparam("ids", type_=sa.String()))
        )
        return column.in_(listed)

    def ids_parameter(self, ids: list[int]) -> list[int] | str:
        return json.dumps(ids)

    def vector_backend(self, connection: sa.Connection) -> str:
        try:
            connection.exec_driver_sql("SELECT vec_version()").scalar()
        except sa.exc.DBAPIError:
            return EXACT_SCAN
        return SQLITE_VEC

    def hnsw_dimensions(self, connection: sa.Connection) -> tuple[int, ...]:
        return ()

    def vector_parameters(self, unit: NDArray[np.float32]) -> dict[str, Any]:
        return {"q": unit.astype("<f4").tobytes()}

    def cosine_distance(self, parameter: str) -> sa.ColumnElement[Any]:
        # ``vec_distance_cosine`` of a zero vector is NULL.
        found = sa.func.vec_distance_cosine(CHUNKS.c.embedding, sa.bindparam(parameter))
        return sa.func.coalesce(found, 1.0)

    def index_distance(self, dimension: int, parameter: str) -> sa.ColumnElement[Any] | None:
        return None  # sqlite-vec scans exactly

    def tune_index_search(self, connection: sa.Connection, ef_search: int) -> None:
        return None

    def insert_rows(
        self,
        connection: sa.Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        returning: tuple[sa.Column[Any], ...],
    ) -> list[Any]:
        # RETURNING makes SQLAlchemy send multi-row INSERTs ("insertmanyvalues"); asking
        # for the returned rows in parameter order (``sort_by_parameter_order``) would make
        # it send one statement per row, which SQLite cannot order otherwise (decision 0097).
        return list(connection.execute(sa.insert(table).returning(*returning), list(rows)))

    def update_chunks(
        self, connection: sa.Connection, names: tuple[str, ...], group: ChunkUpdates
    ) -> None:
        statement = (
            sa.update(CHUNKS)
            .where(CHUNKS.c.id == sa.bindparam("chunk_id"))
            .values({name: sa.bindparam(f"new_{name}") for name in names})
        )
        rows = [
            {"chunk_id": chunk_id, **{f"new_{name}": columns[name] for name in names}}
            for chunk_id, columns in group
        ]
        connection.execute(statement, rows)
