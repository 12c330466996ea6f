"""Round trips per run, counted on the wire: fixed, and the same with 39 or 200,039 lessons.

Both engines run against PostgreSQL and Redis through ``RoundTripProxy``, which counts what
a network charges (a BEGIN, a COMMIT, a prepared statement's PARSE: each visible). A run is
two Redis calls (read phase, write phase) and one PostgreSQL round trip per statement, with
no BEGIN, COMMIT or ROLLBACK around them:

- with an in-process retriever: the lesson candidates and the metrics row;
- with the store's knowledge base (``store.engine()`` as it comes): the lesson candidates
  and the knowledge generation in one statement, on a miss the knowledge search, and the
  metrics row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from benchmarks.wire import RoundTripProxy
from contextstore import connect, connect_async
from contextstore.backends.sql.database import migrate
from contextstore.sample_data import (
    corpus_lines,
    load_demo_queries,
    load_lessons,
    sample_retriever,
)
from tests.backends.redis import drop_namespace

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

BULK = 200_000
SQL_PER_RUN = 2  # lesson candidates, metrics row (an in-process retriever has no generation)
REDIS_PER_RUN = 2  # run_read.lua, run_write.lua


@pytest.fixture
def proxied(
    empty_database_url: str, redis_url: str, namespace: str
) -> Iterator[tuple[str, str, RoundTripProxy, RoundTripProxy]]:
    """(database URL, Redis URL, PostgreSQL proxy, Redis proxy), both through the proxies."""
    url = sa.make_url(empty_database_url)
    target = urlsplit(redis_url)
    with (
        RoundTripProxy(url.host or "127.0.0.1", url.port or 5432, keep_sent=True) as pg,
        RoundTripProxy(target.hostname or "127.0.0.1", target.port or 6379) as rd,
    ):
        database = url.set(host="127.0.0.1", port=pg.port).render_as_string(hide_password=False)
        yield database, f"redis://127.0.0.1:{rd.port}{target.path}", pg, rd
    import redis

    client = redis.Redis.from_url(redis_url)
    drop_namespace(client, namespace)
    client.close()


def load_bulk(database_url: str) -> None:
    """200,000 more active lessons (with their scope keys), generated inside PostgreSQL."""
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "INSERT INTO lessons (entity_id, status, severity, created_at, updated_at, "
                "injection_form) SELECT 'bulk.l' || n, 'active', 'info', now(), now(), "
                f"'form ' || n FROM generate_series(1, {BULK}) n"
            )
            connection.exec_driver_sql(
                "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                "SELECT 'bulk.l' || n, 'tag:bulk-' || mod(n, 1000), 0 "
                f"FROM generate_series(1, {BULK}) n"
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()


def counted(pg: RoundTripProxy, rd: RoundTripProxy, run: Any) -> tuple[int, int, bool]:
    """(PostgreSQL round trips, Redis round trips, cache hit) of one run."""
    before = pg.round_trips, rd.round_trips
    result = run()
    return pg.round_trips - before[0], rd.round_trips - before[1], result.cache_hit


# PostgreSQL only: SQLite runs in process, with no round trips to count.
@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_round_trips_per_run_are_fixed_whatever_the_lesson_count(
    proxied: tuple[str, str, RoundTripProxy, RoundTripProxy], namespace: str
) -> None:
    database, redis_url, pg, rd = proxied
    migrate(database)
    work = load_demo_queries()
    seen: dict[str, set[tuple[int, int, bool]]] = {}
    for label in ("39 lessons", "200,039 lessons"):
        if label.startswith("200"):
            load_bulk(database)
        with connect(database, redis_url, namespace) as store:
            if label.startswith("39"):
                store.lessons.import_records(load_lessons())
            engine = store.engine(retriever=sample_retriever(), worker="trips")
            # Warm up: connections opened, scripts loaded, statements prepared (psycopg
            # prepares a statement on its fifth run on a connection).
            for i in range(12):
                engine.run(f"warm-up {label} {i}", scope=work[i % 26].scope)
            counts = set()
            for i in range(10):
                item = work[i % 26]
                run = partial(engine.run, f"{item.query} ({label} {i})", scope=item.scope)
                counts.add(counted(pg, rd, run))  # a miss
                counts.add(counted(pg, rd, run))  # a hit
            seen[f"sync, {label}"] = counts

        async def run_async(label: str = label) -> set[tuple[int, int, bool]]:
            async with connect_async(database, redis_url, namespace) as store:
                engine = store.engine(retriever=sample_retriever(), worker="trips")
                for i in range(12):
                    await engine.run(f"async warm-up {label} {i}", scope=work[i % 26].scope)
                counts = set()
                for i in range(10):
                    item = work[i % 26]
                    query = f"async {item.query} ({label} {i})"
                    for _ in range(2):  # a miss, then a hit
                        before = pg.round_trips, rd.round_trips
                        result = await engine.run(query, scope=item.scope)
                        counts.add(
                            (
                                pg.round_trips - before[0],
                                rd.round_trips - before[1],
                                result.cache_hit,
                            )
                        )
                return counts

        seen[f"async, {label}"] = asyncio.run(run_async())
    assert {name: {(sql, redis) for sql, redis, _ in counts} for name, counts in seen.items()} == {
        name: {(SQL_PER_RUN, REDIS_PER_RUN)} for name in seen
    }
    # Both paths were counted: misses and hits.
    assert all({hit for *_, hit in counts} == {False, True} for counts in seen.values())


# What a transaction of its own puts on the wire; the run itself sends none (autocommit).
TRANSACTION_WORDS = (b"BEGIN", b"COMMIT", b"ROLLBACK")
# Per hit with the knowledge base: (PostgreSQL, Redis) round trips: the joint read of the
# lesson candidates and the knowledge generation, and the metrics row; the two Redis scripts.
KNOWLEDGE_HIT = (2, 2)


class Wire:
    """What went over the proxies between ``start()`` and ``stop()``: (PostgreSQL round
    trips, Redis round trips, transaction words sent to PostgreSQL)."""

    def __init__(self, pg: RoundTripProxy, rd: RoundTripProxy) -> None:
        self.pg, self.rd = pg, rd
        self.marks = (0, 0, 0)

    def start(self) -> None:
        self.marks = (self.pg.round_trips, self.rd.round_trips, len(self.pg.sent))

    def stop(self) -> tuple[int, int, tuple[bytes, ...]]:
        sent = self.pg.sent[self.marks[2] :]
        words = tuple(word for word in TRANSACTION_WORDS if word in sent)
        return self.pg.round_trips - self.marks[0], self.rd.round_trips - self.marks[1], words


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_a_default_engine_reads_lessons_and_knowledge_in_one_statement(
    proxied: tuple[str, str, RoundTripProxy, RoundTripProxy], namespace: str
) -> None:
    """``store.engine()`` as it comes (lessons and knowledge in SQL): a hit is the joint read
    and the metrics row; a miss adds exactly the knowledge search's own round trips (counted
    here alone, on the same wire; the knowledge base's own tests pin the search itself), and
    no run sends a BEGIN, COMMIT or ROLLBACK beyond the search's own."""
    database, redis_url, pg, rd = proxied
    migrate(database)
    work = load_demo_queries()
    assert not any(word.decode() in item.query for item in work for word in TRANSACTION_WORDS)
    wire = Wire(pg, rd)
    # (flavour and lesson count) → {(SQL, Redis, words, hit) of each run}, and the search's own.
    seen: dict[str, set[tuple[int, int, tuple[bytes, ...], bool]]] = {}
    searches: dict[str, set[tuple[int, int, tuple[bytes, ...]]]] = {}
    for label in ("39 lessons", "200,039 lessons"):
        if label.startswith("200"):
            load_bulk(database)
        with connect(database, redis_url, namespace) as store:
            if label.startswith("39"):
                store.lessons.import_records(load_lessons())
                store.knowledge.import_jsonl(corpus_lines())
            engine = store.engine(worker="trips")
            assert engine.retriever is store.knowledge and engine.reads is store.run_reads
            for i in range(12):
                engine.run(f"warm-up {work[i % 26].query} {label} {i}", scope=work[i % 26].scope)
            # The warm-up's first search started the local index's build, whose reads would
            # otherwise land on the wire during a counted run; then enough runs on the built
            # index that the counted ones are its steady state (the driver prepares a statement
            # on its fifth use, one round trip more that once).
            assert store.knowledge.wait_for_index(60)
            for i in range(40):
                item = work[i % 26]
                engine.run(f"{item.query} (warm {label} {i})", scope=item.scope)
            runs, alone = set(), set()
            for i in range(10):
                item = work[i % 26]
                for _ in range(2):  # a miss, then a hit
                    wire.start()
                    hit = engine.run(f"{item.query} ({label} {i})", scope=item.scope).cache_hit
                    runs.add((*wire.stop(), hit))
                wire.start()
                store.knowledge.search(f"{item.query} ({label} {i})")
                alone.add(wire.stop())
            seen[f"sync, {label}"], searches[f"sync, {label}"] = runs, alone
            # The control: a transaction of its own is seen on the wire.
            wire.start()
            with store.sql_engine.begin() as connection:
                connection.execute(sa.text("SELECT 1"))
            assert wire.stop()[2] == (b"BEGIN", b"COMMIT")

        async def run_async(label: str = label) -> tuple[set[Any], set[Any]]:
            async with connect_async(database, redis_url, namespace) as store:
                engine = store.engine(worker="trips")
                assert engine.reads is store.run_reads
                for i in range(12):
                    item = work[i % 26]
                    await engine.run(f"async warm-up {item.query} {label} {i}", scope=item.scope)
                assert await store.knowledge.wait_for_index(60)
                runs, alone = set(), set()
                for i in range(10):
                    item = work[i % 26]
                    query = f"async {item.query} ({label} {i})"
                    for _ in range(2):  # a miss, then a hit
                        wire.start()
                        hit = (await engine.run(query, scope=item.scope)).cache_hit
                        runs.add((*wire.stop(), hit))
                    wire.start()
                    await store.knowledge.search(query)
                    alone.add(wire.stop())
                return runs, alone

        seen[f"async, {label}"], searches[f"async, {label}"] = asyncio.run(run_async())
    for name, runs in seen.items():
        # The search costs the same every time, so it has one count per flavour.
        assert len(searches[name]) == 1, (name, searches[name])
        ((search_sql, search_redis, search_words),) = searches[name]
        assert search_redis == 0
        hit, miss = KNOWLEDGE_HIT, (KNOWLEDGE_HIT[0] + search_sql, KNOWLEDGE_HIT[1])
        assert runs == {(*miss, search_words, False), (*hit, (), True)}, name
