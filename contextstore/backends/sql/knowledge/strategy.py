"""Where the knowledge base differs between the databases: one interface, a SQLite and a
PostgreSQL implementation (``knowledge.sqlite``, ``knowledge.postgresql``), chosen once per
engine or connection by ``knowledge.strategies.strategy_of``.

What every SQL concern shares (INSERT … ON CONFLICT, code-point order, timestamps fetched
safely, a snapshot read) is asked of ``dialects.Dialect``; this interface holds what only
the knowledge base needs: its full-text search, its JSON metadata filters, its vector
search and its bulk rewrites.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from contextstore.core.knowledge import FilterValue

__all__ = ["EXACT_SCAN", "PGVECTOR", "SQLITE_VEC", "ChunkUpdates", "KnowledgeStrategy"]

# How a database finds vector candidates (``knowledge.vectors``).
SQLITE_VEC: Final = "sqlite-vec"
PGVECTOR: Final = "pgvector"
EXACT_SCAN: Final = "exact scan"

# Rewritten chunks: each chunk's id and its new columns (the same names in one group).
ChunkUpdates = Sequence[tuple[int, dict[str, Any]]]


class KnowledgeStrategy(ABC):
    """How one database stores, filters and searches the knowledge base's chunks."""

    missing_vectors: ClassVar[str]
    """What would make vector searches run inside the database, for ``describe``."""

    chunks_per_statement: ClassVar[int] = 0
    """The fewest chunk rows one INSERT of an import carries (the rows of whole batches, so
    up to a batch more): 0, one statement per batch, unless the database's triggers ask
    for fewer statements (decision 0097)."""

    # -- fetching ------------------------------------------------------------------------

    @abstractmethod
    def fetched_json(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """A JSON column as ``queries.read_metadata`` reads it: decoded by the driver where
        the driver decodes it safely, its text otherwise (a row typed by hand that is not
        JSON then skips its chunks instead of failing the statement)."""

    # -- metadata filters and term counts ------------------------------------------------

    @abstractmethod
    def json_key(self, key: str) -> str:
        """The bound value that names ``key`` of a JSON object (a metadata key, a term)."""

    @abstractmethod
    def bound_filter_values(self, options: Sequence[FilterValue]) -> dict[int, Any]:
        """The bound value of each allowed value that ``metadata_equals`` compares with,
        by its position in ``options`` (a value compared without one is left out)."""

    @abstractmethod
    def metadata_equals(self, i: int, j: int, kind: str) -> sa.ColumnElement[bool]:
        """The document's metadata holds, at key ``fk{i}``, value ``fv{i}_{j}`` of ``kind``
        (``null``, ``true``, ``false``, ``text`` or ``number``), compared as JSON values."""

    @abstractmethod
    def term_count(self, i: int) -> sa.ColumnElement[Any]:
        """How often term ``t{i}`` occurs in the chunk, as the JSON text of the value
        stored (null for none): the reader checks it (``unreadable.read_count``)."""

    # -- the full-text search ------------------------------------------------------------

    @abstractmethod
    def match(self, terms: Sequence[str]) -> str:
        """The full-text query that matches a chunk holding any of the index ``terms``."""

    @abstractmethod
    def search_select(
        self, columns: Sequence[sa.ColumnElement[Any]], shape: tuple[tuple[str, ...], ...]
    ) -> sa.Select[Any]:
        """The search statement: position, text, length, source and metadata of the
        namespace's chunks (``:ns``) that match ``:match`` through the full-text index and
        the filters of ``shape``, then ``columns``; best full-text rank first, at most
        ``:limit``."""

    # -- the local index's reads ---------------------------------------------------------

    @abstractmethod
    def ids_condition(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """``column`` is one of the ids bound as ``:ids`` (``ids_parameter``)."""

    @abstractmethod
    def ids_parameter(self, ids: list[int]) -> list[int] | str:
        """The ``:ids`` value of ``ids_condition``."""

    # -- vectors -------------------------------------------------------------------------

    @abstractmethod
    def vector_backend(self, connection: sa.Connection) -> str:
        """``SQLITE_VEC``, ``PGVECTOR`` or ``EXACT_SCAN``: how this database finds vector
        candidates."""

    @abstractmethod
    def hnsw_dimensions(self, connection: sa.Connection) -> tuple[int, ...]:
        """The dimensions with an HNSW index on ``chunks``."""

    @abstractmethod
    def vector_parameters(self, unit: NDArray[np.float32]) -> dict[str, Any]:
        """The bound query vector: ``:q`` (and ``:minus_q`` where ``index_distance`` is)."""

    @abstractmethod
    def cosine_distance(self, parameter: str) -> sa.ColumnElement[Any]:
        """Cosine distance to the bound ``parameter``, exact; a zero vector's counts as
        cosine 0 (distance 1)."""

    @abstractmethod
    def index_distance(self, dimension: int, parameter: str) -> sa.ColumnElement[Any] | None:
        """Cosine distance to the bound ``parameter`` as an approximate index orders by;
        ``None`` where the database has no such index."""

    @abstractmethod
    def tune_index_search(self, connection: sa.Connection, ef_search: int) -> None:
        """Settings an ``index_distance`` search runs with, local to the transaction."""

    # -- writing -------------------------------------------------------------------------

    @abstractmethod
    def insert_rows(
        self,
        connection: sa.Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        returning: tuple[sa.Column[Any], ...],
    ) -> list[Any]:
        """Insert ``rows`` (the same keys each) in the order given, in as few statements as
        the database takes, each row's id given in that order; the ``returning`` rows."""

    # -- reindexing ----------------------------------------------------------------------

    @abstractmethod
    def update_chunks(
        self, connection: sa.Connection, names: tuple[str, ...], group: ChunkUpdates
    ) -> None:
        """Rewrite columns ``names`` of the chunks in ``group``."""
