"""A search right after a write: answered while the local index is rebuilt in the background,
against the rebuild in the caller's thread that came before it, on SQLite and PostgreSQL.

The corpus and queries are ``sec_knowledge_topk``'s (real prose, 8–30-word sentences). Each
round adds one new document to a namespace whose index is current, then times one search,
top 10:

* **before** (the index rebuilt in the caller's thread, then the search): the round waits
  for the index (``wait_for_index``, which starts a build and waits for it) and searches,
  timed together, which is what a search did before builds moved off the caller's thread;
* **after**: the search alone, answered by the SQL ranking while the build runs on its
  daemon thread beside it (same process, same GIL, same two cores); the build is then waited
  for outside the timing, and how long the index took to come back is reported.

Also counted: how many of the answers right after the write are the index's own answer to
the same query once it is back (the SQL ranking is exact while a query's matches fit
``candidate_limit``, 1,000 by default; these sentences often match more).

``python -m benchmarks.sec_search_after_write [--size 10000] [--rounds 15]
[--docs docs/benchmarks-retrieval.md]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.prose_corpus import natural_queries, prose_documents
from benchmarks.sec_knowledge_topk import hits, p, postgres_schema
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.builds import wait_for_builds
from contextstore.core.knowledge import DocumentInput

TOP_K = 10
START, END = "<!-- after-write:start -->", "<!-- after-write:end -->"


def measure_database(
    url: str, documents: list[DocumentInput], queries: Sequence[str], rounds: int
) -> dict[str, Any]:
    migrate(url)
    engine = create_database_engine(url)
    result: dict[str, Any] = {}
    try:
        base = KnowledgeBase(engine, "bench")
        base.import_documents(documents)
        assert base.wait_for_index()
        assert base.local is not None and base.local.snapshot is not None
        result["chunks"] = base.local.snapshot.count
        filler = documents[: rounds * 2]
        before, after, rebuilt, same = [], [], [], 0
        for number in range(rounds):
            query = queries[number % len(queries)]
            base.add(filler[2 * number].text, f"new-{uuid.uuid4().hex}")
            started = time.perf_counter()
            assert base.wait_for_index()
            base.search(query, TOP_K)
            before.append((time.perf_counter() - started) * 1000)

            base.add(filler[2 * number + 1].text, f"new-{uuid.uuid4().hex}")
            started = time.perf_counter()
            answer = base.search(query, TOP_K)
            after.append((time.perf_counter() - started) * 1000)
            assert wait_for_builds(600)
            rebuilt.append(time.perf_counter() - started)
            assert base.wait_for_index()
            same += hits(answer) == hits(base.search(query, TOP_K))
        result.update(
            before_p50=p(before, 0.5),
            after_p50=p(after, 0.5),
            after_p95=p(after, 0.95),
            rebuilt_p50=p(rebuilt, 0.5),
            same=same,
            rounds=rounds,
        )
    finally:
        engine.dispose()
    return result


def run(size: int, rounds: int) -> dict[str, Any]:
    chosen, pool = prose_documents(size)
    documents = [DocumentInput(source=s, text=t) for s, t in chosen]
    queries = natural_queries(pool, rounds)
    row: dict[str, Any] = {"size": size}
    folder = tempfile.mkdtemp(prefix="bench-after-write-")
    try:
        row["sqlite"] = measure_database(f"sqlite:///{folder}/k.db", documents, queries, rounds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    with postgres_schema() as url:
        row["postgresql"] = measure_database(url, documents, queries, rounds)
    print(row, flush=True)
    return row


def table(row: dict[str, Any]) -> str:
    lines = [
        "| database | chunks | before: rebuild, then search, p50 | after: search p50 / p95 "
        "| speed-up (p50) | index back after (p50) | same top-10 as the index |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, key in (("SQLite", "sqlite"), ("PostgreSQL", "postgresql")):
        r = row[key]
        lines.append(
            f"| {name} | {int(r['chunks']):,} | {r['before_p50']:.0f} ms "
            f"| {r['after_p50']:.1f} / {r['after_p95']:.1f} ms "
            f"| {r['before_p50'] / r['after_p50']:.1f}× | {r['rebuilt_p50']:.2f} s "
            f"| {r['same']}/{r['rounds']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--docs", type=Path)
    args = parser.parse_args()
    text = table(run(args.size, args.rounds))
    print(text)
    if args.docs is not None:
        page = args.docs.read_text()
        head, rest = page.split(START, 1)
        _, tail = rest.split(END, 1)
        args.docs.write_text(f"{head}{START}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
