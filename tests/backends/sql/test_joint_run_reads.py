"""The joint SQL read and the direct driver answer every run as the plain reads do.

On one database (SQLite, PostgreSQL), engines read the same lessons and knowledge base and
each keeps a cache, windows and metrics rows of its own. The reference is the sync engine
with the plain run reads (the lesson repository, then the knowledge base's generation); the
others must return the same results, run for run, and write the same metrics rows: the sync
engine with ``LessonsAndKnowledge``, the async engine with the plain reads and with
``AsyncLessonsAndKnowledge``, and on PostgreSQL both again with the run's statements sent
on psycopg directly (``DriverPool``). Halfway, a document is added (the generation moves,
so every cached entry is stale) and a lesson is retired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import sqlalchemy as sa

from contextstore.backends.sql.aio import (
    AsyncKnowledgeBase,
    AsyncLessonRepository,
    AsyncLessonsAndKnowledge,
    AsyncMetricsRepository,
    create_async_database_engine,
)
from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.backends.sql.run_reads import LessonsAndKnowledge
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.separate import AsyncSeparateRunReads, SeparateRunReads
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import corpus_lines, load_lessons
from tests.backends.contract.runs import (
    FIRST_AFTER_CHANGE,
    Driven,
    adriven,
    assert_same_runs,
    driven,
    engine_options,
)

RETIRED = "nw.lessons.ops.db.failover.0001"  # matched by the first queries (tag ops)
ROW = (
    "namespace, query_hash, budget, context_length, chunk_count, lessons_matched, "
    "lessons_included, response_ms, guard_passed, cache_hit, guard_warnings, "
    "lessons_matched_ids, lessons_included_ids, chunk_sources"
)


def rows_of(engine: sa.Engine, worker: str) -> Callable[[], Sequence[object]]:
    """The metrics rows ``worker`` wrote, in the order of its runs, without the worker."""

    def read() -> Sequence[object]:
        with engine.connect() as connection:
            return connection.execute(
                sa.text(f"SELECT {ROW} FROM query_metrics WHERE worker = :w ORDER BY id"),
                {"w": worker},
            ).all()

    return read


def test_the_joint_read_and_the_direct_driver_answer_as_the_plain_reads(
    database_url: str, namespace: str
) -> None:
    engine = create_database_engine(database_url)
    lessons = LessonRepository(engine)
    knowledge = KnowledgeBase(engine, namespace)
    metrics = MetricsRepository(engine)
    lessons.import_records(load_lessons())
    knowledge.import_jsonl(corpus_lines())
    postgres = engine.dialect.name == "postgresql"

    def sync_engine(name: str, **parts: object) -> Driven:
        built = ContextEngine(
            retriever=knowledge,
            lessons=lessons,
            metrics=metrics,
            **{**engine_options(), "worker": name},
            **parts,  # type: ignore[arg-type]
        )
        return driven(name, built, rows_of(engine, name))

    aengine = create_async_database_engine(database_url)
    with asyncio.Runner() as runner:
        pool = DriverPool(aengine, 4) if postgres else None
        aknowledge = AsyncKnowledgeBase(aengine, namespace)

        def async_engine(name: str, *, joint: bool, direct: bool) -> Driven:
            given = pool if direct else None
            built = AsyncContextEngine(
                retriever=aknowledge,
                lessons=AsyncLessonRepository(aengine, pool=given),
                metrics=AsyncMetricsRepository(aengine, pool=given),
                reads=AsyncLessonsAndKnowledge(aengine, aknowledge, pool=given) if joint else None,
                **{**engine_options(), "worker": name},
            )
            expected = AsyncLessonsAndKnowledge if joint else AsyncSeparateRunReads
            assert isinstance(built.reads, expected)
            return adriven(name, built, runner, rows_of(engine, name))

        reference = sync_engine("sync-plain")
        joint = sync_engine("sync-joint", reads=LessonsAndKnowledge(engine, knowledge))
        engines = [
            reference,
            joint,
            async_engine("async-plain", joint=False, direct=False),
            async_engine("async-joint", joint=True, direct=False),
        ]
        if postgres:
            engines += [
                async_engine("async-plain-direct", joint=False, direct=True),
                async_engine("async-joint-direct", joint=True, direct=True),
            ]

        def change() -> None:
            knowledge.add("Failover drills run every quarter, on a Tuesday.", "ops/drills.md")
            lessons.retire(RETIRED)

        try:
            results = assert_same_runs(engines, change)
        finally:
            if pool is not None:
                runner.run(pool.aclose())
            runner.run(aengine.dispose())
            engine.dispose()
    # The change made every entry stale: the first run of each query after it missed.
    assert [result.cache_hit for result in results[FIRST_AFTER_CHANGE::2]] == [False] * 6
    included = [{lesson.entity_id for lesson in r.lessons.included} for r in results]
    assert any(RETIRED in ids for ids in included[:FIRST_AFTER_CHANGE])
    assert not any(RETIRED in ids for ids in included[FIRST_AFTER_CHANGE:])


def test_the_plain_reads_are_the_default_and_the_store_picks_the_joint_one(
    database_url: str, namespace: str
) -> None:
    from contextstore import connect

    with connect(database_url, "", namespace) as store:
        assert isinstance(store.engine().reads, LessonsAndKnowledge)
        assert isinstance(store.engine(lessons=None).reads, SeparateRunReads)
        assert isinstance(ContextEngine(retriever=store.knowledge).reads, SeparateRunReads)
