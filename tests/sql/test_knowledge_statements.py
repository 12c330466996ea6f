"""A search is one SQL statement, in autocommit: counted per cursor and on the wire.

Every search, sync or async, on SQLite or PostgreSQL, sends exactly one statement (a SELECT:
no BEGIN, COMMIT or ROLLBACK through the cursor, which is how SQLite's transactions are
emitted). On PostgreSQL psycopg sends BEGIN by itself, out of SQLAlchemy's sight, so the
wire proxy counts what reaches the server: one round trip per search.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from benchmarks.wire import RoundTripProxy
from contextstore.compose import Chunk
from contextstore.embedding import HashingEmbedder
from contextstore.sample_data import corpus_lines
from contextstore.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.sql.database import create_database_engine, migrate
from contextstore.sql.knowledge import KnowledgeBase

CORPUS_LINES = corpus_lines()
# (query, filters): one term and several, with and without a filter, one that finds nothing.
SEARCHES: list[tuple[str, dict[str, Any] | None]] = [
    ("refund", None),
    ("refund policy for annual plans", None),
    ("refund policy for annual plans", {"team": "support"}),
    ("database failover replica", {"team": ["ops", "coding"]}),
    ("zzqx", None),
]
# Round-trip counts after this many searches of each kind on a connection: psycopg prepares a
# statement on its fifth run, one extra round trip, once.
WARM_UP = 6


@contextmanager
def cursor_statements(engine: sa.Engine) -> Iterator[list[str]]:
    """Every SQL string sent through a cursor of ``engine`` while the block runs."""
    sent: list[str] = []

    def record(_c: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def one_select(sent: list[str]) -> bool:
    return len(sent) == 1 and sent[0].lstrip().upper().startswith("SELECT")


@pytest.mark.parametrize("embedded", [False, True], ids=["lexical", "fused"])
def test_a_search_is_one_statement_sync_and_async(database_url: str, embedded: bool) -> None:
    namespace = f"one_{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"embed_fn": HashingEmbedder(dim=16)} if embedded else {}
    engine = create_database_engine(database_url)
    try:
        base = KnowledgeBase(engine, namespace, **options)
        empty = KnowledgeBase(engine, f"empty_{namespace}", **options)
        with cursor_statements(engine) as sent:
            assert empty.search("refund", 3) == []
        assert one_select(sent), sent
        base.import_jsonl(CORPUS_LINES)
        expected: list[list[Chunk]] = []
        for query, filters in SEARCHES:
            with cursor_statements(engine) as sent:
                expected.append(base.search(query, 4, filters))
            assert one_select(sent), (query, sent)
        assert [len(found) for found in expected[:4]] == [4, 4, 4, 4]
        assert expected[4] == []
        for query in ("", "   ", "?!"):  # no term: nothing to ask the database
            with cursor_statements(engine) as sent:
                assert base.search(query, 4) == []
            assert sent == []
    finally:
        engine.dispose()

    async def search_async() -> list[tuple[list[Chunk], list[str]]]:
        async_engine = create_async_database_engine(database_url)
        try:
            base = AsyncKnowledgeBase(async_engine, namespace, **options)
            found = []
            for query, filters in SEARCHES:
                with cursor_statements(async_engine.sync_engine) as sent:
                    found.append((await base.search(query, 4, filters), sent))
            return found
        finally:
            await async_engine.dispose()

    results = asyncio.run(search_async())
    assert [chunks for chunks, _ in results] == expected
    for (query, _), (_, sent) in zip(SEARCHES, results, strict=True):
        assert one_select(sent), (query, sent)


@pytest.fixture
def proxied_url(empty_database_url: str) -> Iterator[tuple[str, RoundTripProxy]]:
    url = sa.make_url(empty_database_url)
    with RoundTripProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port)
        yield through.render_as_string(hide_password=False), proxy


def trips(proxy: RoundTripProxy, call: Callable[[], object]) -> int:
    before = proxy.round_trips
    call()
    return proxy.round_trips - before


# PostgreSQL only: SQLite runs in process, with no round trip to count.
@pytest.mark.parametrize(
    "empty_database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_a_search_is_one_round_trip_on_postgres(
    proxied_url: tuple[str, RoundTripProxy],
) -> None:
    url, proxy = proxied_url
    migrate(url)
    namespace = f"wire_{uuid.uuid4().hex[:8]}"
    engine = create_database_engine(url)
    try:
        base = KnowledgeBase(engine, namespace)
        base.import_jsonl(CORPUS_LINES)
        for _ in range(WARM_UP):
            for query, filters in SEARCHES:
                base.search(query, 4, filters)
        sync_counts = [
            trips(proxy, lambda q=query, f=filters: base.search(q, 4, f))  # type: ignore[misc]
            for query, filters in SEARCHES * 2
        ]
    finally:
        engine.dispose()

    async def count_async() -> list[int]:
        async_engine = create_async_database_engine(url)
        try:
            base = AsyncKnowledgeBase(async_engine, namespace)
            for _ in range(WARM_UP):
                for query, filters in SEARCHES:
                    await base.search(query, 4, filters)
            counts = []
            for query, filters in SEARCHES * 2:
                before = proxy.round_trips
                await base.search(query, 4, filters)
                counts.append(proxy.round_trips - before)
            return counts
        finally:
            await async_engine.dispose()

    assert sync_counts == [1] * len(SEARCHES) * 2
    assert asyncio.run(count_async()) == [1] * len(SEARCHES) * 2


def test_statistics_come_with_the_candidates(engine: sa.Engine) -> None:
    """The row carries the namespace's statistics as they were when the statement ran."""
    base = KnowledgeBase(engine, f"st_{uuid.uuid4().hex[:8]}")
    base.import_jsonl(CORPUS_LINES[:6])
    plan = base.plan("refund policy", 3)
    assert plan.statement is not None
    statement, values = plan.statement
    with engine.connect() as connection:
        rows = connection.execute(statement, values).all()
        stats = connection.execute(
            sa.text("SELECT chunk_count, total_length FROM knowledge_stats WHERE namespace = :n"),
            {"n": base.namespace},
        ).one()
        frequencies = dict(
            connection.execute(
                sa.text(
                    "SELECT term, frequency FROM knowledge_terms "
                    "WHERE namespace = :n AND term IN ('refund', 'policy')"
                ),
                {"n": base.namespace},
            ).all()
        )
    assert rows and all(tuple(row[-4:-2]) == tuple(stats) for row in rows)
    assert all(
        {term: f for term, f in zip(("refund", "policy"), row[-2:], strict=True) if f is not None}
        == frequencies
        for row in rows
    )
    assert set(frequencies) == {"policy", "refund"}
