"""Real processes sharing one knowledge base: changes are seen at once, concurrent work is safe.

* Process B serves runs (reading queries on stdin, answering on stdout) through a real Redis
  cache; process A adds and deletes a document; B's next run sees each change.
* Four processes import while four others run the engine, all at once: every document lands
  exactly once, the trigger-kept statistics equal a recount, and no process sees an error.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import subprocess
import sys
import textwrap
import traceback
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from contextstore import connect
from contextstore.backends.sql.database import create_database_engine
from tests.backends.redis import drop_namespace
from tests.backends.sql.test_knowledge import recounted, stats_row
from tests.leftovers import unique_name

pytestmark = pytest.mark.slow

RUNNER = textwrap.dedent(
    """
    import json, sys
    from contextstore import connect

    store = connect(database_url=sys.argv[1], redis_url=sys.argv[2], namespace=sys.argv[3])
    engine = store.engine()
    print("ready", flush=True)
    for line in sys.stdin:
        result = engine.run(line.strip())
        sources = [chunk.source for chunk in result.chunks_used]
        print(json.dumps({"sources": sources, "hit": result.cache_hit}), flush=True)
    store.close()
    """
)

WRITER = textwrap.dedent(
    """
    import sys
    from contextstore import connect

    store = connect(database_url=sys.argv[1], redis_url="", namespace=sys.argv[3])
    if sys.argv[4] == "add":
        store.knowledge.add("Rotate the zebra keys every 90 days.", "ops/zebra.md")
    else:
        store.knowledge.delete("ops/zebra.md")
    store.close()
    """
)


@pytest.mark.redis
def test_process_b_sees_process_a_changes_on_its_next_run(
    database_url: str, redis_url: str
) -> None:
    namespace = unique_name("fleet")
    arguments = [database_url, redis_url, namespace]
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdin is not None and runner.stdout is not None

    def ask() -> dict[str, Any]:
        assert runner.stdin is not None and runner.stdout is not None
        runner.stdin.write("How often do we rotate the zebra keys?\n")
        runner.stdin.flush()
        answer: dict[str, Any] = json.loads(runner.stdout.readline())
        return answer

    def write(action: str) -> None:
        subprocess.run([sys.executable, "-c", WRITER, *arguments, action], check=True, timeout=120)

    try:
        assert runner.stdout.readline().strip() == "ready"
        assert ask() == {"sources": [], "hit": False}
        assert ask() == {"sources": [], "hit": True}  # the Redis cache serves it
        write("add")
        assert ask() == {"sources": ["ops/zebra.md"], "hit": False}
        assert ask() == {"sources": ["ops/zebra.md"], "hit": True}
        write("delete")
        assert ask() == {"sources": [], "hit": False}
    finally:
        runner.stdin.close()
        runner.wait(timeout=60)
        client = redis.Redis.from_url(redis_url)
        drop_namespace(client, namespace)  # the entries, the counters and the windows
        client.close()
    assert runner.returncode == 0


IMPORTERS = 4
RUNNERS = 4
OWN_DOCUMENTS = 12
SHARED_DOCUMENTS = 10


def _line(source: str, text: str) -> str:
    return json.dumps({"source": source, "text": text, "metadata": {"by": source[:2]}})


def _importer(url: str, namespace: str, worker: int, start: Any, results: Any) -> None:
    """Import own documents in batches of 4, and the shared file after each batch."""
    try:
        store = connect(database_url=url, redis_url="", namespace=namespace)
        shared = [_line(f"shared-{i}", f"shared zebra document {i}") for i in range(10)]
        own = [
            _line(f"w{worker}-{i}", f"worker {worker} zebra document number {i}")
            for i in range(OWN_DOCUMENTS)
        ]
        if not start.wait(60):
            raise TimeoutError("no start signal")
        for batch in range(0, OWN_DOCUMENTS, 4):
            store.knowledge.import_jsonl(own[batch : batch + 4])
            store.knowledge.import_jsonl(shared)
        store.close()
        results.put((f"importer {worker}", None))
    except BaseException:
        results.put((f"importer {worker}", traceback.format_exc()))


def _runner(url: str, namespace: str, worker: int, start: Any, results: Any) -> None:
    try:
        store = connect(database_url=url, redis_url="", namespace=namespace)
        engine = store.engine()
        if not start.wait(60):
            raise TimeoutError("no start signal")
        for _ in range(8):
            engine.run("zebra document")
            store.knowledge.search("worker zebra", 5)
        store.close()
        results.put((f"runner {worker}", None))
    except BaseException:
        results.put((f"runner {worker}", traceback.format_exc()))


def test_four_importers_and_four_runners_at_once(database_url: str) -> None:
    namespace = unique_name("fleet")
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    processes = [
        context.Process(target=_importer, args=(database_url, namespace, i, start, results))
        for i in range(IMPORTERS)
    ] + [
        context.Process(target=_runner, args=(database_url, namespace, i, start, results))
        for i in range(RUNNERS)
    ]
    for process in processes:
        process.start()
    start.set()
    reports: dict[str, str | None] = {}
    try:
        for _ in processes:
            name, error = results.get(timeout=300)
            reports[name] = error
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {len(processes)} processes reported")
    finally:
        for process in processes:
            process.join(timeout=60)
    assert {name: error for name, error in reports.items() if error} == {}
    assert len(reports) == IMPORTERS + RUNNERS

    engine = create_database_engine(database_url)
    try:
        with engine.connect() as connection:
            sources = (
                connection.execute(
                    sa.text("SELECT source FROM documents WHERE namespace = :ns ORDER BY source"),
                    {"ns": namespace},
                )
                .scalars()
                .all()
            )
        expected = sorted(
            [f"shared-{i}" for i in range(SHARED_DOCUMENTS)]
            + [f"w{w}-{i}" for w in range(IMPORTERS) for i in range(OWN_DOCUMENTS)]
        )
        assert sources == expected
        total = IMPORTERS * OWN_DOCUMENTS + SHARED_DOCUMENTS
        assert stats_row(engine, namespace) == recounted(engine, namespace)[0]
        assert stats_row(engine, namespace) is not None
        assert stats_row(engine, namespace)[:2] == (total, total)  # type: ignore[index]
    finally:
        engine.dispose()
