"""The SQL knowledge base: search, growth, ingestion, ``InMemoryRetriever`` and memory.

* search p50/p95 at two sizes against one hand-written full-text statement (plus the
  statistics read) and the same re-ranking (``contextstore.core.ranking.rank``);
* growth small → large with each query's matches held constant (marker words that occur in
  a fixed number of documents whatever the size);
* ingestion (``import_documents``) against a raw ``executemany`` of the same rows;
* ``InMemoryRetriever`` on the same corpus, for comparison;
* memory per process: what a search holds against an ``InMemoryRetriever`` holding the corpus.
"""

from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from benchmarks.context import Bench
from benchmarks.report import Row, at_least, at_most, ms, rate
from benchmarks.timing import percentile, timed_call_ms
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import DocumentInput, prepare_passages
from contextstore.core.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    query_terms,
    rank,
)
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.core.tokens import index_term

LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
MARKERS = 12  # marker words; each occurs in MARKER_DOCS documents at every size
MARKER_DOCS = 40
TOP_K = 8


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def corpus(count: int, seed: int = 7) -> list[DocumentInput]:
    """``count`` one-passage documents; marker ``mkN`` is in exactly ``MARKER_DOCS`` of them."""
    rng = random.Random(seed)
    words = _vocabulary(rng, 4000)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf-like
    marked: dict[int, list[str]] = {}
    for marker in range(MARKERS):
        for index in rng.sample(range(min(count, 5000)), MARKER_DOCS):
            marked.setdefault(index, []).append(f"mk{marker}")
    documents = []
    for index in range(count):
        body = rng.choices(words, weights, k=rng.randint(40, 90))
        body[rng.randrange(len(body)) : 0] = marked.get(index, [])
        documents.append(
            DocumentInput(
                source=f"doc/{index:06d}",
                text=" ".join(body)[:780],
                metadata={"shard": index % 8},
            )
        )
    return documents


def queries() -> list[str]:
    return [f"mk{marker} mk{(marker + 1) % MARKERS}" for marker in range(MARKERS)]


def hand_written(engine: sa.Engine, namespace: str, limit: int) -> Callable[[str], list[Chunk]]:
    """One hand-written full-text statement, the statistics it needs, the same re-ranking."""
    if engine.dialect.name == "postgresql":
        candidates = sa.text(
            "SELECT c.position, c.text, c.length, c.term_counts, d.source, d.metadata "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.namespace = :ns AND c.search @@ to_tsquery('simple', :q) "
            "ORDER BY ts_rank(c.search, to_tsquery('simple', :q)) DESC, c.id LIMIT :limit"
        )
    else:
        candidates = sa.text(
            "SELECT c.position, c.text, c.length, c.term_counts, d.source, d.metadata "
            "FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
            "JOIN documents d ON d.id = c.document_id "
            "WHERE chunks_fts MATCH :q AND c.namespace = :ns ORDER BY f.rank LIMIT :limit"
        )
    statistics = sa.text(
        "SELECT s.chunk_count, s.total_length, t.term, t.frequency FROM knowledge_stats s "
        "LEFT JOIN knowledge_terms t ON t.namespace = s.namespace AND t.term IN :terms "
        "WHERE s.namespace = :ns"
    ).bindparams(sa.bindparam("terms", expanding=True))
    parameters = RankingParameters()
    joiner = " | " if engine.dialect.name == "postgresql" else " OR "

    def run(query: str) -> list[Chunk]:
        terms = [index_term(t) for t in query_terms(query)]
        with engine.connect() as connection:
            stats = connection.execute(statistics, {"ns": namespace, "terms": terms}).all()
            rows = connection.execute(
                candidates, {"ns": namespace, "q": joiner.join(terms), "limit": limit}
            ).all()
        frequencies = {term: int(f) for _, _, term, f in stats if term is not None}
        corpus_stats = CorpusStatistics(int(stats[0][0]), int(stats[0][1]), frequencies)
        found = [
            Candidate(
                text=text,
                source=source,
                position=position,
                length=length,
                counts=json.loads(counts) if isinstance(counts, str) else counts,
                metadata=json.loads(meta) if isinstance(meta, str) else meta,
            )
            for position, text, length, counts, source, meta in rows
        ]
        return rank(found, terms, corpus_stats, parameters, TOP_K)

    return run


def raw_insert(engine: sa.Engine, namespace: str, documents: Sequence[DocumentInput]) -> None:
    """The same rows ``import_documents`` writes, by plain ``executemany``."""
    now = "2026-01-01 00:00:00.000000"
    prepared = {d.source: prepare_passages(d.text) for d in documents}
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO documents (namespace, source, metadata, content_hash, created_at, "
                "updated_at) VALUES (:ns, :source, :metadata, :hash, :now, :now)"
            ),
            [
                {
                    "ns": namespace,
                    "source": d.source,
                    "metadata": json.dumps(dict(d.metadata)),
                    "hash": d.content_hash,
                    "now": now,
                }
                for d in documents
            ],
        )
        ids = dict(
            connection.execute(
                sa.text("SELECT source, id FROM documents WHERE namespace = :ns"), {"ns": namespace}
            ).all()
        )
        connection.execute(
            sa.text(
                "INSERT INTO chunks (document_id, namespace, position, text, terms, term_counts, "
                "length) VALUES (:d, :ns, :p, :text, :terms, :counts, :length)"
            ),
            [
                {
                    "d": ids[d.source],
                    "ns": namespace,
                    "p": passage.position,
                    "text": passage.text,
                    "terms": passage.terms,
                    "counts": json.dumps(dict(passage.counts)),
                    "length": passage.length,
                }
                for d in documents
                for passage in prepared[d.source]
            ],
        )


def _times(
    bench: Bench, label: str, calls: dict[str, Callable[[str], object]]
) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in calls}
    items = list(calls.items())
    rounds = bench.pick(3, 6)
    for round_number in range(rounds):
        bench.say(f"{label}: round {round_number + 1}/{rounds}")
        for index, query in enumerate(queries()):
            order = items if (round_number + index) % 2 == 0 else items[::-1]
            for name, call in order:
                found[name].append(timed_call_ms(lambda c=call, q=query: c(q)))  # type: ignore[misc]
    return found


def _traced_bytes(build: Callable[[], object]) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    value = build()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return max(after, peak) - before, value


def run(bench: Bench, dialect: str) -> list[Row]:
    if dialect == "postgresql":
        bench.services.require_postgres()
    label = LABELS[dialect]
    small, large = (1_000, 10_000) if bench.quick else (10_000, 100_000)
    documents = corpus(large)
    url = bench.services.database_url(dialect, "knowledge")
    engine = bench.services.engine(url)
    section = f"Knowledge base, {label}"
    rows: list[Row] = []

    # Ingestion: the library against executemany of the same rows, on a slice of its own.
    slice_size = bench.pick(500, 2_000)
    sample = documents[:slice_size]
    bench.say(f"{label}: ingestion of {slice_size:,} documents")
    started = time.perf_counter()
    KnowledgeBase(engine, "ingest-ours").import_documents(sample)
    ours_s = time.perf_counter() - started
    started = time.perf_counter()
    raw_insert(engine, "ingest-raw", sample)
    raw_s = time.perf_counter() - started
    target, met = at_least(raw_s / ours_s, 0.5)
    rows.append(
        Row(
            section,
            f"ingestion, {slice_size:,} one-passage documents",
            rate(slice_size / ours_s),
            "raw executemany of the same rows (triggers fire for both)",
            rate(slice_size / raw_s),
            raw_s / ours_s,
            target,
            met,
            values={"ours_s": ours_s, "base_s": raw_s, "documents": slice_size},
        )
    )

    base = KnowledgeBase(engine, "corpus")
    p50: dict[int, float] = {}
    matches: dict[int, list[int]] = {}
    for size, start in ((small, 0), (large, small)):
        bench.say(f"{label}: loading {size:,} documents")
        for batch in range(start, size, 5_000):
            base.import_documents(documents[batch : min(batch + 5_000, size)])
        if dialect == "postgresql":
            # Fresh planner statistics, as autovacuum would gather them after a bulk load. No
            # VACUUM: the search index keeps no pending list to merge (``fastupdate = off``).
            # A checkpoint writes the load's dirty pages out first: otherwise each search's
            # backend writes some of them back to free buffers (128 MB of shared_buffers hold
            # less than 100k chunks), and the growth measured the load's aftermath.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(sa.text("ANALYZE"))
                connection.execute(sa.text("CHECKPOINT"))
        hand = hand_written(engine, "corpus", base.candidate_limit)
        base.wait_for_index()  # searches time the index, not the SQL ranking meanwhile
        # Every chunk a query matches (fewer than the candidate limit): the same at each size.
        matches[size] = [len(base.search(q, base.candidate_limit)) for q in queries()]
        mismatches = sum(
            base.search(q, TOP_K) != hand(q) for q in queries()
        )  # doubles as a warm-up
        times = _times(
            bench,
            f"{label} {size:,} chunks",
            {"ours": lambda q: base.search(q, TOP_K), "hand": hand},
        )
        for name, fraction in (("p50", 0.5), ("p95", 0.95)):
            ours, theirs = percentile(times["ours"], fraction), percentile(times["hand"], fraction)
            target, met = at_most(ours / theirs, 1.25)
            if mismatches:
                met = False
            rows.append(
                Row(
                    section,
                    f"search, {size // 1000:,}k chunks, {name}",
                    ms(ours),
                    "hand-written full-text statement + statistics read + the same rank()",
                    ms(theirs),
                    ours / theirs,
                    target,
                    met,
                    note=(f"{MARKER_DOCS} matches per query word" if name == "p50" else "")
                    + (f"; **{mismatches} queries disagreed**" if mismatches else ""),
                    values={"ours_ms": ours, "base_ms": theirs, "chunks": size},
                )
            )
        p50[size] = percentile(times["ours"], 0.5)

    grown = p50[large] / p50[small]
    target, met = at_most(grown, 1.5)
    met = met and matches[small] == matches[large]
    rows.append(
        Row(
            section,
            f"growth {small // 1000}k → {large // 1000}k chunks, search p50",
            ms(p50[large]),
            f"same queries at {small // 1000}k",
            ms(p50[small]),
            grown,
            target,
            met,
            note=(
                f"matches per query: {_spread(matches[large])} at both sizes"
                if matches[small] == matches[large]
                else f"**matches differ: {_spread(matches[small])} → {_spread(matches[large])}**"
            ),
        )
    )

    bench.say(f"{label}: InMemoryRetriever on the same {large:,} documents")
    memory_bytes, retriever = _traced_bytes(lambda: _loaded(documents))
    assert isinstance(retriever, InMemoryRetriever)
    memory_times = [
        timed_call_ms(lambda q=q: retriever.retrieve(q, None, TOP_K))  # type: ignore[misc]
        for q in queries() * bench.pick(3, 6)
    ]
    rows.append(
        Row(
            section,
            f"InMemoryRetriever.retrieve, {large // 1000:,}k chunks, p50 (informational)",
            ms(percentile(memory_times, 0.5)),
            "the knowledge base's search",
            ms(p50[large]),
            percentile(memory_times, 0.5) / p50[large],
            note="ratio: in-memory time / SQL time; the in-memory index is per process",
        )
    )

    def searching() -> object:
        # A process that opens the shared base builds its own local index (decision 0089):
        # that index, kept while it searches, is what the process holds.
        opened = KnowledgeBase(engine, "corpus")
        opened.wait_for_index()
        return opened, [opened.search(q, TOP_K) for q in queries()]

    search_bytes, _ = _traced_bytes(searching)
    rows.append(
        Row(
            section,
            f"memory per process, {large // 1000:,}k chunks (tracemalloc)",
            _size(search_bytes),
            "each process holding the corpus in an InMemoryRetriever",
            _size(memory_bytes),
            search_bytes / memory_bytes,
            note="ours: the peak while a process builds its local index and searches it",
        )
    )
    return rows


def _loaded(documents: Sequence[DocumentInput]) -> Any:
    retriever = InMemoryRetriever()
    for document in documents:
        retriever.add(document.text, document.source, document.metadata)
    retriever.retrieve("warm", None, 1)  # builds the index
    return retriever


def _spread(counts: Sequence[int]) -> str:
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}–{high}"


def _size(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"
