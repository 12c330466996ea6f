"""A process-local index of one namespace's chunks: exact lexical top-k without ranking in SQL.

The knowledge base's SQL search has the database find every chunk sharing a word with the
query and rank them all before Python re-ranks the best ``candidate_limit``; a sentence of
common words matches most of a namespace, so that costs time in proportion to the namespace
and is exact only while the matches fit the limit. Here the process keeps, per namespace, the
postings the BM25 ranking reads (a term–chunk matrix of saturations, the chunks' sources,
positions and document metadata, no text), built from one consistent read of the database,
and ranks a query in memory exactly as ``InMemoryRetriever`` does (the floats of
``core.topk.full_scores``, the order of ``core.ranking.top_order``), in time proportional to
the postings of the query's terms rather than to the namespace (``knowledge.topk``, decision
0096). One statement then reads the texts of the ``top_k`` chunks by primary key together
with the namespace's generation: if the generation is the one the index was built at, the
index describes exactly the snapshot those texts come from, so the answer is exact; if it
moved (any write bumps it), the index is dropped and the search is answered by the SQL
ranking while a new index is built in the background (``knowledge.builds``, one build at a
time), swapped in once built if the generation has not moved again. See decisions 0089 (the
index) and 0098 (its builds off the caller's thread) for the measurements behind this.

Metadata filters keep the knowledge base's JSON semantics (``filter_conditions``): a number
matches by value, a bool only a bool, a string only a string, ``None`` only a present null.
A chunk whose document metadata or text cannot be read (typed by hand) is never returned,
and still counts in the statistics, as in SQL; one whose count of a term cannot be read
(``unreadable.check_count``) is not returned for queries of that term, as in SQL.
"""

from __future__ import annotations

import json
import math
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from contextstore.backends.sql.database import read_only
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.knowledge.builds import RETRY_AFTER, BuildState, start_daemon
from contextstore.backends.sql.knowledge.queries import read_metadata
from contextstore.backends.sql.knowledge.settings import settings_version_column
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.strategy import KnowledgeStrategy
from contextstore.backends.sql.knowledge.tables import CHUNKS, DOCUMENTS, STATS
from contextstore.backends.sql.knowledge.topk import Masks, top_candidates
from contextstore.backends.sql.unreadable import (
    MAX_TERM_COUNT,
    UnreadableRowError,
    check_json,
    check_text,
)
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import FilterValue
from contextstore.core.ranking import RankingParameters, average_length, idf, saturation, top_order

__all__ = ["MAX_LOCAL_CHUNKS", "LocalIndex", "Snapshot", "snapshot_from_rows"]

MAX_LOCAL_CHUNKS: Final = 2_000_000
"""A namespace with more chunks than this is searched in SQL: its index would take more than
about a gigabyte of the process (some 56 MB per 100,000 chunks of prose, see decision 0089),
and its build two to five times that while it runs (``benchmarks.sec_knowledge_topk``)."""
# Filter masks kept per snapshot (one per distinct filter), least recently used dropped.
MAX_CACHED_FILTERS: Final = 64
# A search ranks again this many times when a text it was about to return proves unreadable
# or a newer index was swapped in under it; then it is answered in SQL. ``refresh`` builds
# this many times at most when writes keep making its build stale.
ATTEMPTS: Final = 3

Filters = Mapping[str, tuple[FilterValue, ...]]


@dataclass(frozen=True, slots=True)
class Ranked:
    """A search's ``top_k`` chunks in the index: row numbers, best first, and their scores."""

    rows: tuple[int, ...]
    scores: tuple[float, ...]


@dataclass(slots=True)
class Snapshot:
    """One namespace's postings at ``generation``; immutable but for ``hidden`` and caches.

    Chunk rows are numbered ``0 … count-1``; ``chunk_ids[r]`` is row ``r``'s primary key and
    ``documents[r]`` its document's number in ``sources`` / ``metadata``.
    """

    generation: int
    settings_version: int
    chunk_ids: NDArray[np.int64]
    documents: NDArray[np.int32]
    positions: NDArray[np.int32]
    sources: tuple[str, ...]
    metadata: tuple[Mapping[str, Any] | None, ...]
    vocabulary: Mapping[str, int]
    ptr: NDArray[np.int64]
    docs: NDArray[np.int32]
    saturations: NDArray[np.float64]
    # Rows never returned: their document's metadata or their text cannot be read.
    hidden: NDArray[np.bool_]
    any_hidden: bool = False
    # Per term number, the rows whose count of it cannot be read (typed by hand): never
    # returned for a query of that term, as the SQL ranking skips them.
    unreadable: Mapping[int, NDArray[np.int64]] = field(default_factory=dict)
    filters: OrderedDict[tuple[Any, ...], NDArray[np.bool_]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Zeroed score arrays for ``knowledge.topk``; list.pop and list.append are atomic.
    _scratches: list[NDArray[np.float64]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(self.chunk_ids.size)

    def nbytes(self) -> int:
        """The arrays' bytes (the vocabulary's and metadata's Python objects excluded)."""
        arrays = (self.chunk_ids, self.documents, self.positions, self.ptr, self.docs)
        return sum(a.nbytes for a in arrays) + self.saturations.nbytes + self.hidden.nbytes

    def impacts(
        self, terms: Sequence[str], weights: Mapping[str, int] | None = None
    ) -> list[tuple[NDArray[np.int32], NDArray[np.float64]]]:
        """Each query term found here, in query order: its rows and their BM25 impacts."""
        found = []
        vocabulary, ptr, count = self.vocabulary, self.ptr, self.count
        for term in terms:
            row = vocabulary.get(term)
            if row is None:
                continue
            start, end = int(ptr[row]), int(ptr[row + 1])
            weight = (1 if weights is None else weights.get(term, 1)) * idf(count, end - start)
            found.append((self.docs[start:end], weight * self.saturations[start:end]))
        return found

    def rank(
        self,
        terms: Sequence[str],
        top_k: int,
        filters: Filters,
        weights: Mapping[str, int] | None = None,
    ) -> Ranked:
        """The best ``top_k`` rows for ``terms``: ``InMemoryRetriever``'s lexical ranking,
        in time proportional to the terms' postings (``knowledge.topk``)."""
        if top_k <= 0 or not terms or self.count == 0:
            return Ranked((), ())
        postings = self.impacts(terms, weights)
        scratch = self._scratch()
        rows, scores = top_candidates(postings, scratch, top_k, self._masks(filters, terms))
        # top_candidates leaves the scratch zeroed; one it raised from is dropped, not reused.
        self._scratches.append(scratch)
        sources, documents, positions = self.sources, self.documents, self.positions
        order = top_order(
            scores, lambda i: (sources[documents[rows[i]]], int(positions[rows[i]])), top_k
        )
        return Ranked(tuple(int(rows[i]) for i in order), tuple(float(scores[i]) for i in order))

    def hide(self, row: int) -> None:
        """Never return ``row`` again (its text cannot be read)."""
        self.hidden[row] = True
        self.any_hidden = True

    def _scratch(self) -> NDArray[np.float64]:
        # One zeroed score per row for each search running at once, reused: allocating and
        # zeroing a fresh one would cost time in proportion to the namespace.
        try:
            return self._scratches.pop()
        except IndexError:
            return np.zeros(self.count, dtype=np.float64)

    def _masks(self, filters: Filters, terms: Sequence[str]) -> Masks:
        hidden = self._hidden_for(terms)
        if not filters:
            return None, hidden
        key = tuple((k, tuple((_kind(v), v) for v in options)) for k, options in filters.items())
        with self.lock:
            mask = self.filters.get(key)
            if mask is not None:
                self.filters.move_to_end(key)
        if mask is None:
            wanted = np.fromiter(
                (m is not None and _matches(m, filters) for m in self.metadata),
                dtype=bool,
                count=len(self.metadata),
            )
            mask = wanted[self.documents]
            with self.lock:
                self.filters[key] = mask
                while len(self.filters) > MAX_CACHED_FILTERS:
                    self.filters.popitem(last=False)
        return mask, hidden

    def _hidden_for(self, terms: Sequence[str]) -> NDArray[np.bool_] | None:
        hidden = self.hidden if self.any_hidden else None
        if not self.unreadable:
            return hidden
        numbers = (self.vocabulary.get(term) for term in terms)
        skipped = [self.unreadable[n] for n in numbers if n is not None and n in self.unreadable]
        if not skipped:
            return hidden
        hidden = np.zeros(self.count, dtype=bool) if hidden is None else hidden.copy()
        hidden[np.concatenate(skipped)] = True
        return hidden


def _kind(value: FilterValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return "text" if isinstance(value, str) else "number"


def _matches(metadata: Mapping[str, Any], filters: Filters) -> bool:
    """``filter_conditions`` in Python: every key present with one of its allowed values."""
    for key, options in filters.items():
        if key not in metadata:
            return False
        value = metadata[key]
        kind = "object" if isinstance(value, dict | list) else _kind(value)
        if not any(_kind(o) == kind and o == value for o in options):
            return False
    return True


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def snapshot_from_rows(
    generation: int,
    settings_version: int,
    chunks: list[Any],
    documents: list[Any],
    parameters: RankingParameters,
) -> Snapshot:
    """Build the postings from ``read_statements``' rows (CPU only, no I/O).

    The rows are consumed: both lists are emptied once read, so that their memory (more than
    the finished index) is free before the postings are sorted. The CSR matrix is built as
    ``InMemoryRetriever._build`` builds its own, so every saturation is the same float.
    """
    numbers: dict[int, int] = {}
    sources: list[str] = []
    metadata: list[Mapping[str, Any] | None] = []
    for document_id, source, raw in documents:
        numbers[int(document_id)] = len(sources)
        # A document the SQL search would skip (typed by hand, unreadable) is never returned.
        readable: tuple[str, Mapping[str, Any] | None]
        try:
            readable = check_text("source", source), check_json("metadata", read_metadata(raw))
        except UnreadableRowError:
            readable = "", None
        sources.append(readable[0])
        metadata.append(readable[1])
    documents.clear()
    n = len(chunks)
    # One chunk's term counts decoded at a time, straight into flat arrays: decoding them all
    # first held a dict per chunk at once, nine times the finished index at 100k chunks.
    vocabulary: dict[str, int] = {}
    number_of = vocabulary.setdefault
    term_numbers, frequencies = array("q"), array("d")
    per_chunk = np.empty(n, dtype=np.int64)
    chunk_ids = np.empty(n, dtype=np.int64)
    document_of = np.empty(n, dtype=np.int32)
    positions = np.empty(n, dtype=np.int32)
    lengths = np.empty(n, dtype=np.float64)
    for index, (chunk_id, document_id, position, length, raw_counts) in enumerate(chunks):
        try:
            counts = _decoded(raw_counts)
            values = array("d", counts.values())
        except (AttributeError, TypeError, OverflowError, ValueError, RecursionError):
            counts, values = _typed_by_hand(raw_counts)
        per_chunk[index] = len(counts)
        term_numbers.extend([number_of(term, len(vocabulary)) for term in counts])
        frequencies.extend(values)
        chunk_ids[index] = chunk_id
        document_of[index] = numbers[int(document_id)]
        positions[index] = position
        lengths[index] = length
    chunks.clear()
    terms = np.frombuffer(term_numbers, dtype=np.int64)
    unreadable = _unreadable_counts(terms, np.frombuffer(frequencies, dtype=np.float64), per_chunk)
    df = np.bincount(terms, minlength=len(vocabulary))
    order = np.argsort(terms, kind="stable")
    del terms, term_numbers  # freed before the saturations' temporaries, as are the next
    docs = np.repeat(np.arange(n, dtype=np.int32), per_chunk)[order]
    tf = np.frombuffer(frequencies, dtype=np.float64)[order]
    del order, frequencies
    ptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
    np.cumsum(df, out=ptr[1:])
    avgdl = average_length(n, int(lengths.sum()))
    hidden = np.fromiter((metadata[d] is None for d in document_of), dtype=bool, count=n)
    return Snapshot(
        generation=generation,
        settings_version=settings_version,
        chunk_ids=chunk_ids,
        documents=document_of,
        positions=positions,
        sources=tuple(sources),
        metadata=tuple(metadata),
        vocabulary=vocabulary,
        ptr=ptr,
        docs=docs,
        saturations=saturation(tf, lengths[docs], avgdl, parameters.k1, parameters.b),
        hidden=hidden,
        any_hidden=bool(hidden.any()),
        unreadable=unreadable,
    )


def _typed_by_hand(raw: Any) -> tuple[list[str], array[float]]:
    """A ``term_counts`` that is not an object of numbers: its terms as the database's
    triggers counted them (an array's items are named 0, 1, …), NaN for each count that is
    not a number (``_unreadable_counts`` then marks it); none if Python cannot decode it."""
    try:
        # Integers as floats: one of more digits than Python converts to int becomes inf.
        counts = json.loads(raw, parse_int=float) if isinstance(raw, str | bytes) else raw
    except (ValueError, RecursionError):
        return [], array("d")
    if isinstance(counts, dict):
        return list(counts), array("d", (_number(value) for value in counts.values()))
    if isinstance(counts, list):
        return [str(i) for i in range(len(counts))], array("d", [math.nan] * len(counts))
    return [], array("d")


def _number(value: Any) -> float:
    try:
        return float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:
        return math.nan


def _unreadable_counts(
    terms: NDArray[np.int64], frequencies: NDArray[np.float64], per_chunk: NDArray[np.int64]
) -> dict[int, NDArray[np.int64]]:
    """Per term number, the rows whose count of it is not what ``unreadable.check_count``
    reads; each such count becomes 1 in ``frequencies``, a stand-in never returned."""
    readable = (frequencies >= 1.0) & (frequencies <= MAX_TERM_COUNT)
    readable &= frequencies == np.floor(frequencies)
    if readable.all():
        return {}
    where = np.flatnonzero(~readable)
    frequencies[where] = 1.0
    rows = np.searchsorted(np.cumsum(per_chunk), where, side="right")
    return {int(t): np.unique(rows[terms[where] == t]) for t in np.unique(terms[where])}


def read_statements(
    strategy: KnowledgeStrategy,
) -> tuple[sa.Select[Any], sa.Select[Any], sa.Select[Any]]:
    """The three reads of a build, run in one snapshot: generation, chunks, documents."""
    namespace: sa.BindParameter[Any] = sa.bindparam("ns")
    # The generation (null: no statistics row) and the analyzer's settings version, one row.
    generation = sa.select(
        sa.select(STATS.c.generation).where(STATS.c.namespace == namespace).scalar_subquery(),
        settings_version_column(namespace),
    )
    counts = strategy.fetched_json(CHUNKS.c.term_counts)
    chunks = (
        sa.select(CHUNKS.c.id, CHUNKS.c.document_id, CHUNKS.c.position, CHUNKS.c.length, counts)
        .where(CHUNKS.c.namespace == namespace)
        .order_by(CHUNKS.c.id)
    )
    documents = sa.select(
        DOCUMENTS.c.id,
        DOCUMENTS.c.source,
        strategy.fetched_json(DOCUMENTS.c["metadata"]),
    ).where(DOCUMENTS.c.namespace == namespace)
    return generation, chunks, documents


def fetch_statement(strategy: KnowledgeStrategy) -> sa.Select[Any]:
    """The namespace's generation, and the text of each chunk whose id is in ``ids``: one
    row per chunk found, or one row of nulls but the generation when none is."""
    wanted = strategy.ids_condition(CHUNKS.c.id)
    return (
        sa.select(STATS.c.generation, CHUNKS.c.id, CHUNKS.c.text)
        .select_from(
            STATS.outerjoin(CHUNKS, sa.and_(wanted, CHUNKS.c.namespace == STATS.c.namespace))
        )
        .where(STATS.c.namespace == sa.bindparam("ns"))
    )


class LocalIndex:
    """One namespace's ``Snapshot`` for one ``KnowledgeBase``, rebuilt when its generation moves.

    Thread-safe: searches read the current snapshot without a lock. A search that finds none
    is answered in SQL, then calls ``start_build`` (a daemon thread, at most one build in
    flight, ``state``); ``refresh`` waits for an index describing the namespace as it
    is (``KnowledgeBase.wait_for_index``). The async knowledge base calls ``read``,
    ``build``, ``current_generation`` and ``install`` apart, so the I/O is awaited and the
    building runs off the event loop. ``clock`` and ``retry_after``: when a failed build may
    be tried again (``builds.BuildState``).
    """

    def __init__(
        self,
        engine: sa.Engine,
        namespace: str,
        parameters: RankingParameters,
        *,
        max_chunks: int = MAX_LOCAL_CHUNKS,
        guard: Callable[[Callable[[], Any]], Any] = lambda read: read(),
        clock: Callable[[], float] = time.monotonic,
        retry_after: float = RETRY_AFTER,
    ) -> None:
        self._engine = engine
        self._namespace = namespace
        self._parameters = parameters
        self._max_chunks = max_chunks
        self._guard = guard
        self._install_lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._too_large_at: int | None = None
        self._strategy = strategy_of(engine)
        self._fetch = DirectStatement(engine, fetch_statement(self._strategy))
        self._reads = read_statements(self._strategy)
        self.state = BuildState(f"namespace {namespace!r}", clock=clock, retry_after=retry_after)
        # A pool of one connection per thread (SQLAlchemy's for an in-memory SQLite database)
        # gives another thread another, empty database: such an engine builds in the caller's.
        self._in_caller = isinstance(engine.pool, sa.pool.SingletonThreadPool)
        self.builds = 0
        """Snapshots built (the CPU step, ``build``)."""

    @property
    def statement(self) -> DirectStatement:
        """The read of the top chunks' texts and the generation (``fetch``)."""
        return self._fetch

    @property
    def snapshot(self) -> Snapshot | None:
        """The current snapshot (``None`` before the first build or after one went stale)."""
        return self._snapshot

    def too_large_at(self, generation: int) -> bool:
        """Whether the namespace held more than ``max_chunks`` chunks at ``generation``."""
        return self._too_large_at == generation

    # -- the sync path --------------------------------------------------------------------

    def start_build(self, *, now: bool = False) -> bool:
        """Build in the background (in the caller's thread on an engine whose threads see
        databases of their own) unless a build is in flight or (unless ``now``) one failed
        lately (``state.claim``); ``True`` if one was started. Never raises for the build: a
        failure is logged (``BuildState.release``) and the snapshot left as it was."""
        if not self.state.claim(now=now):
            return False
        if self._in_caller:
            self._build_in_background()
        else:
            start_daemon(self._build_in_background, f"contextstore-index-{self._namespace}")
        return True

    def _build_in_background(self) -> None:
        error: Exception | None = None
        try:
            self.build_once()
        except Exception as raised:
            error = raised
        finally:
            self.state.release(error)

    def build_once(self) -> bool | None:
        """Read, build and ``install`` (the caller holds the claim): ``True`` once installed,
        ``False`` when the namespace was written meanwhile, ``None`` when it holds more than
        ``max_chunks`` chunks."""
        read = self._guard(self.read)
        if read is None:
            return None
        snapshot = self.build(*read)
        return self.install(snapshot, self._guard(self.current_generation))

    def refresh(self, timeout: float | None = None) -> bool:
        """Wait until the current snapshot describes the namespace as it is now: the build
        in flight is waited for, then one is started (even soon after a failure) and waited
        for if still needed. ``False`` after ``timeout`` seconds (``None``: no limit; the
        build goes on), when the namespace holds more than ``max_chunks`` chunks, when the
        build failed (logged), or when writes kept making ``ATTEMPTS`` builds stale."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for _ in range(ATTEMPTS):
            if not self.state.wait(left()):
                return False
            generation = self._guard(self.current_generation)
            snapshot = self._snapshot
            if snapshot is not None and snapshot.generation == generation:
                return True
            if self.too_large_at(generation):
                return False
            if self.start_build(now=True):
                if not self.state.wait(left()):
                    return False
                if self.state.failures_in_a_row:
                    return False
            # Else a search started a build in between: the next turn waits for it.
        return False

    def drop(self, snapshot: Snapshot) -> None:
        """Forget ``snapshot`` if it is still the current one: the next search rebuilds."""
        if self._snapshot is snapshot:
            self._snapshot = None

    # -- the steps ------------------------------------------------------------------------

    def read(self) -> tuple[int, int, list[Any], list[Any]] | None:
        """Generation, settings version, chunk rows and document rows, in one snapshot of the
        database; ``None`` when the namespace holds more than ``max_chunks`` chunks."""
        generation, chunks, documents = self._reads
        values = {"ns": self._namespace}
        # A deferred BEGIN on SQLite (``read_only``): one snapshot without the write lock,
        # which a build in the background would otherwise hold from writers while it reads.
        with (
            read_only(self._engine).connect() as connection,
            dialect_of(connection).snapshot(connection).begin(),
        ):
            found = connection.execute(generation, values).first()
            current = 0 if found is None or found[0] is None else int(found[0])
            version = 0 if found is None or found[1] is None else int(found[1])
            if self._too_large_at == current:
                return None
            chunk_rows = list(connection.execute(chunks.limit(self._max_chunks + 1), values))
            if len(chunk_rows) > self._max_chunks:
                self._too_large_at = current
                return None
            document_rows = list(connection.execute(documents, values))
        return current, version, chunk_rows, document_rows

    def build(
        self, generation: int, version: int, chunks: list[Any], documents: list[Any]
    ) -> Snapshot:
        """The snapshot of ``read``'s rows (CPU only; it empties both lists once it has read
        them, ``snapshot_from_rows``); ``install`` makes it current."""
        snapshot = snapshot_from_rows(generation, version, chunks, documents, self._parameters)
        self.builds += 1
        return snapshot

    def current_generation(self) -> int:
        """The namespace's generation now (one primary-key read)."""
        return _generation(self.fetch(self.generation_values()))

    def generation_values(self) -> dict[str, Any]:
        """``fetch``'s values for no chunk: its one row carries the generation only."""
        return self._values([])

    def install(self, snapshot: Snapshot, generation: int) -> bool:
        """Make ``snapshot`` current if the namespace is still at its generation
        (``generation``, read after it was built) and no newer one was installed; ``False``
        (dropped) when it was written meanwhile."""
        if snapshot.generation != generation:
            return False
        with self._install_lock:
            current = self._snapshot
            if current is None or current.generation <= snapshot.generation:
                self._snapshot = snapshot
        return True

    def fetch_values(self, ranked: Ranked, snapshot: Snapshot) -> dict[str, Any]:
        return self._values([int(snapshot.chunk_ids[r]) for r in ranked.rows])

    def _values(self, ids: list[int]) -> dict[str, Any]:
        return {"ns": self._namespace, "ids": self._strategy.ids_parameter(ids)}

    def fetch(self, values: Mapping[str, Any]) -> list[Any]:
        return self._fetch.rows(values)

    def answer(
        self, snapshot: Snapshot, ranked: Ranked, rows: Sequence[Sequence[Any]]
    ) -> list[Chunk] | None:
        """The chunks of ``ranked`` from the fetched ``rows``; ``None`` when the snapshot is
        stale (the caller drops it and searches again) or a text could not be read (its row
        is hidden from now on, and the caller ranks again)."""
        if _generation(rows) != snapshot.generation:
            if self._snapshot is snapshot:
                self._snapshot = None
            return None
        texts = {int(row[1]): row[2] for row in rows if row[1] is not None}
        chunks = []
        unreadable = False
        for r, score in zip(ranked.rows, ranked.scores, strict=True):
            try:
                text = check_text("text", texts[int(snapshot.chunk_ids[r])])
            except (UnreadableRowError, KeyError):
                snapshot.hide(r)
                unreadable = True
                continue
            document = snapshot.documents[r]
            metadata = snapshot.metadata[document]
            assert metadata is not None  # rows without readable metadata are hidden
            chunks.append(
                Chunk(
                    text=text,
                    source=snapshot.sources[document],
                    score=score,
                    metadata={**metadata, "passage": int(snapshot.positions[r])},
                )
            )
        return None if unreadable else chunks


def _generation(rows: Sequence[Sequence[Any]]) -> int:
    return int(rows[0][0]) if rows else 0
