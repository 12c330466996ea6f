"""The local index is rebuilt in the background: a search never waits for a build.

A search that finds the index missing or stale is ranked in SQL (exact while the matches fit
``candidate_limit``) while one build runs on a daemon thread (a task of the loop, its CPU
work on a daemon thread, for ``AsyncKnowledgeBase``); the build is swapped in when it is
done if the namespace was not written meanwhile. Builds are held on an event here, so "the
search did not wait" is a fact about threads and counters, not about the clock.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge import index as knowledge_index
from contextstore.backends.sql.knowledge.builds import running_builds, wait_for_builds
from contextstore.backends.sql.knowledge.index import LocalIndex
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import DocumentInput
from contextstore.core.retrieval import InMemoryRetriever

DOCUMENTS = [
    ("the refund policy of the shop: a refund within thirty days", "a.md", {"team": "support"}),
    ("a refund needs a receipt and the order number", "b.md", {"team": "support"}),
    ("the deploy runbook: roll back the release first", "c.md", {"team": "ops"}),
    ("failover of the primary database to the replica", "d.md", {"team": "ops"}),
    ("the receipt of a payment is mailed within a day", "e.md", {"team": "billing"}),
]
ADDED = ("a refund of a shipping fee needs no receipt", "f.md", {"team": "billing"})
QUERIES = [
    ("refund receipt", None),
    ("the", None),
    ("the refund of the order", {"team": "support"}),
    ("database replica failover", None),
]
SECONDS = 30.0


def hits(chunks: list[Chunk]) -> list[tuple[str, int, float]]:
    return [(c.source, c.metadata["passage"], c.score) for c in chunks]


def memory_of(documents: list[tuple[str, str, dict[str, Any]]]) -> InMemoryRetriever:
    memory = InMemoryRetriever()
    for text, source, metadata in documents:
        memory.add(text, source, metadata)
    return memory


def expected(memory: InMemoryRetriever) -> list[list[tuple[str, int, float]]]:
    return [hits(memory.retrieve(q, None, 3, f)) for q, f in QUERIES]


def inputs(documents: list[tuple[str, str, dict[str, Any]]]) -> list[DocumentInput]:
    return [DocumentInput(source=s, text=t, metadata=m) for t, s, m in documents]


class HeldBuilds:
    """``snapshot_from_rows`` (a build's CPU step) recording its threads, held while
    ``held`` is set, raising while ``failures`` is above zero."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.held = False
        self.failures = 0

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.get_ident())
        self.entered.set()
        if self.held:
            assert self.release.wait(SECONDS), "the test never released the build"
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("the build failed")
        return snapshot_from_rows(*args)


snapshot_from_rows = knowledge_index.snapshot_from_rows


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldBuilds]:
    held = HeldBuilds()
    monkeypatch.setattr(knowledge_index, "snapshot_from_rows", held)
    try:
        yield held
    finally:
        held.release.set()
        assert wait_for_builds(SECONDS)


def built_base(engine: sa.Engine, **options: Any) -> KnowledgeBase:
    base = KnowledgeBase(engine, f"bg_{uuid.uuid4().hex[:10]}", **options)
    base.import_documents(inputs(DOCUMENTS))
    assert base.wait_for_index()
    return base


def test_a_search_right_after_a_write_is_exact_without_waiting_for_the_build(
    engine: sa.Engine, builds: HeldBuilds
) -> None:
    base = built_base(engine)
    local = base.local
    assert local is not None and local.builds == 1
    reads: list[int] = []
    read = local.read

    def reading() -> Any:
        reads.append(threading.get_ident())
        return read()

    local.read = reading  # type: ignore[method-assign]
    builds.held = True
    base.add(*ADDED)
    caller = threading.get_ident()
    found = [hits(base.search(q, 3, f)) for q, f in QUERIES]
    # Answered while the build is held: ranked in SQL, the same as in memory.
    assert found == expected(memory_of([*DOCUMENTS, ADDED]))
    assert builds.entered.wait(SECONDS) and local.state.building
    assert local.state.started == 2 and local.builds == 1
    assert reads and caller not in reads and caller not in builds.threads
    assert not base.wait_for_index(0.05)  # the build is still held
    builds.release.set()
    assert base.wait_for_index()
    assert local.builds == 2 and local.state.started == 2
    assert [hits(base.search(q, 3, f)) for q, f in QUERIES] == found


def test_concurrent_searches_during_a_build_start_one_build(
    engine: sa.Engine, builds: HeldBuilds
) -> None:
    base = built_base(engine)
    local = base.local
    assert local is not None and local.state.started == 1
    builds.held = True
    base.add(*ADDED)
    want = expected(memory_of([*DOCUMENTS, ADDED]))
    results: list[list[list[tuple[str, int, float]]]] = []
    start = threading.Barrier(8)

    def search() -> None:
        start.wait(SECONDS)
        results.append([hits(base.search(q, 3, f)) for q, f in QUERIES * 3])

    searchers = [threading.Thread(target=search) for _ in range(8)]
    for thread in searchers:
        thread.start()
    for thread in searchers:
        thread.join(SECONDS)
    assert results == [want * 3] * 8
    assert local.state.started == 2 and local.state.building
    builds.release.set()
    assert base.wait_for_index()
    assert local.state.started == 2 and local.builds == 2


def test_a_failing_build_is_logged_once_and_tried_again_on_a_later_search(
    engine: sa.Engine, builds: HeldBuilds, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    base = KnowledgeBase(engine, f"bg_{uuid.uuid4().hex[:10]}", candidate_limit=2)
    local = LocalIndex(
        engine,
        base.namespace,
        base.parameters,
        guard=base.guarded,
        clock=lambda: now[0],
        retry_after=10.0,
    )
    base.local = local
    base.import_documents(inputs(DOCUMENTS))
    memory = memory_of(DOCUMENTS)
    builds.failures = 2
    caplog.set_level(logging.DEBUG, logger="contextstore.backends.sql.knowledge.builds")

    def search() -> list[tuple[str, int, float]]:
        found = hits(base.search("refund receipt", 2))
        assert wait_for_builds(SECONDS)
        return found

    # Within the candidate limit: the SQL ranking is exact while no index is there.
    want = hits(memory.retrieve("refund receipt", None, 2))
    assert search() == want
    assert local.snapshot is None and local.state.failures_in_a_row == 1
    assert search() == want  # too soon after the failure: no build started
    assert local.state.started == 1
    now[0] += 10.0
    assert search() == want  # tried again, fails again
    assert local.state.started == 2 and local.state.failures_in_a_row == 2
    now[0] += 10.0
    assert search() == want  # tried again, built
    assert local.state.started == 3 and local.state.failures_in_a_row == 0
    assert local.snapshot is not None and local.builds == 1
    # Past the candidate limit (2), only the index is exact: it answers now.
    assert hits(base.search("the", 5)) == hits(memory.retrieve("the", None, 5))
    logged = [(r.levelno, r.exc_info is not None) for r in caplog.records]
    assert logged == [(logging.WARNING, True), (logging.DEBUG, True)]
    assert "could not be built" in caplog.records[0].getMessage()


def test_the_index_built_in_the_background_ranks_as_in_memory(engine: sa.Engine) -> None:
    # A candidate limit of 1: only the index can be exact for these queries.
    base = KnowledgeBase(engine, f"bg_{uuid.uuid4().hex[:10]}", candidate_limit=1)
    base.import_documents(inputs(DOCUMENTS))
    assert len(base.search("the", 5)) == 1  # in SQL, bounded by its candidate limit
    assert wait_for_builds(SECONDS)  # the background build, not one of wait_for_index
    local = base.local
    assert local is not None and local.snapshot is not None and local.builds == 1
    assert local.snapshot.generation == base.generation()
    memory = memory_of(DOCUMENTS)
    for query, filters in [*QUERIES, ("the", None), ("a the of", {"team": "ops"})]:
        found = hits(base.search(query, 5, filters))
        assert found == hits(memory.retrieve(query, None, 5, filters)), query
    assert local.builds == 1 and local.state.started == 1


def test_a_build_made_stale_by_a_write_is_not_swapped_in(
    engine: sa.Engine, builds: HeldBuilds
) -> None:
    base = KnowledgeBase(engine, f"bg_{uuid.uuid4().hex[:10]}")
    base.import_documents(inputs(DOCUMENTS))
    builds.held = True
    base.search("refund", 3)
    assert builds.entered.wait(SECONDS)
    base.add(*ADDED)  # while the build holds a snapshot of the namespace before it
    builds.release.set()
    assert wait_for_builds(SECONDS)
    local = base.local
    assert local is not None and local.builds == 1 and local.snapshot is None
    assert [hits(base.search(q, 3, f)) for q, f in QUERIES] == expected(
        memory_of([*DOCUMENTS, ADDED])
    )
    assert base.wait_for_index() and local.builds == 2


def test_an_awaited_search_right_after_a_write_does_not_wait_for_the_build(
    database_url: str, builds: HeldBuilds
) -> None:
    namespace = f"bg_{uuid.uuid4().hex[:10]}"
    want = expected(memory_of([*DOCUMENTS, ADDED]))

    async def scenario() -> None:
        async_engine = create_async_database_engine(database_url)
        try:
            base = AsyncKnowledgeBase(async_engine, namespace, candidate_limit=1000)
            await base.import_documents(inputs(DOCUMENTS))
            assert await base.wait_for_index()
            local = base.target.local
            assert local is not None and local.builds == 1
            builds.held = True
            await base.add(*ADDED)
            loop_thread = threading.get_ident()
            rounds = await asyncio.gather(
                *(asyncio.gather(*(base.search(q, 3, f) for q, f in QUERIES)) for _ in range(8))
            )
            assert [[hits(found) for found in round_] for round_ in rounds] == [want] * 8
            # One build for the 32 searches, none of its CPU work on the loop.
            assert await asyncio.to_thread(builds.entered.wait, SECONDS)
            assert local.state.started == 2 and local.state.building and local.builds == 1
            assert loop_thread not in builds.threads
            assert not await base.wait_for_index(0.05)  # the build is still held
            builds.release.set()
            assert await base.wait_for_index()
            assert local.builds == 2 and local.state.started == 2
            assert [hits(await base.search(q, 3, f)) for q, f in QUERIES] == want
        finally:
            await async_engine.dispose()

    asyncio.run(scenario())


def test_a_build_in_flight_does_not_keep_the_process_from_exiting(
    migrated_sqlite_file: Path, tmp_path: Path
) -> None:
    database = tmp_path / "k.db"
    database.write_bytes(migrated_sqlite_file.read_bytes())
    script = f"""
import threading, sys
from contextstore.backends.sql.knowledge import index as knowledge_index
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.builds import running_builds

entered = threading.Event()
def forever(*args):
    entered.set()
    threading.Event().wait()
knowledge_index.snapshot_from_rows = forever
base = KnowledgeBase(create_database_engine({f"sqlite:///{database}"!r}), "exit")
base.add("the refund policy", "a.md")
print([c.source for c in base.search("refund", 3)])
assert entered.wait(30) and running_builds()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['a.md']"
    assert not running_builds()


def test_a_build_reading_the_namespace_does_not_keep_writers_waiting(engine: sa.Engine) -> None:
    """The build's one consistent read takes no write lock (a deferred BEGIN on SQLite,
    REPEATABLE READ on PostgreSQL): a write goes through while a build is held mid-read."""
    base = KnowledgeBase(engine, f"bg_{uuid.uuid4().hex[:10]}")
    base.import_documents(inputs(DOCUMENTS))
    reading, release = threading.Event(), threading.Event()

    def hold(connection: Any, cursor: Any, statement: str, *args: Any) -> None:
        building = threading.current_thread().name.startswith("contextstore-index")
        if building and "term_counts" in statement:
            reading.set()
            assert release.wait(SECONDS), "the test never released the build"

    sa.event.listen(engine, "after_cursor_execute", hold)
    try:
        base.search("refund", 3)
        assert reading.wait(SECONDS)
        base.add(*ADDED)  # while the build's read transaction is open
        assert running_builds()
    finally:
        release.set()
        assert wait_for_builds(SECONDS)
        sa.event.remove(engine, "after_cursor_execute", hold)
    local = base.local
    assert local is not None and local.builds == 1 and local.snapshot is None  # stale
    assert base.wait_for_index() and local.builds == 2


def test_an_in_memory_sqlite_database_builds_its_index_in_the_callers_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``sqlite://`` gives each thread a database of its own (SQLAlchemy's pool of one
    connection per thread): a build in another thread would read an empty database."""
    engine = create_database_engine("sqlite://")
    try:
        migrate(engine)
        base = KnowledgeBase(engine, "memory", candidate_limit=1)
        base.import_documents(inputs(DOCUMENTS))
        with caplog.at_level(logging.WARNING):
            assert len(base.search("the", 5)) == 1  # in SQL, then the build, in this thread
            assert base.wait_for_index()
            local = base.local
            assert local is not None and local.snapshot is not None and local.builds == 1
            memory = memory_of(DOCUMENTS)
            for query, filters in [*QUERIES, ("the", None)]:
                found = hits(base.search(query, 5, filters))
                assert found == hits(memory.retrieve(query, None, 5, filters)), query
            base.add(*ADDED)
            base.search("receipt", 5)  # in SQL, then the rebuild, in this thread
            assert local.builds == 2
            found = hits(base.search("refund receipt", 5))
            assert found == hits(memory_of([*DOCUMENTS, ADDED]).retrieve("refund receipt", None, 5))
        assert running_builds() == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        engine.dispose()
