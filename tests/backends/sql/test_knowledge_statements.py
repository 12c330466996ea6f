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
from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.core.compose import Chunk
from contextstore.core.embedding import HashingEmbedder
from contextstore.sample_data import corpus_lines
from tests.leftovers import unique_name

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
    """Every SQL string sent through a cursor of ``engine`` while the block runs: through
    ``Connection.execute`` (its events) and straight to the driver (``DirectStatement``,
    which a search's compiled statement is sent by, past those events)."""
    sent: list[str] = []

    def record(_c: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    run = DirectStatement._run

    def direct(statement: DirectStatement, values: Any, *, fetch: bool) -> list[Any]:
        if statement._engine is engine:
            sent.append(statement.sql)
        return run(statement, values, fetch=fetch)

    event.listen(engine, "before_cursor_execute", record)
    patch = pytest.MonkeyPatch()
    patch.setattr(DirectStatement, "_run", direct)
    try:
        yield sent
    finally:
        patch.undo()
        event.remove(engine, "before_cursor_execute", record)


def one_select(sent: list[str], found: bool = True) -> bool:
    """One SELECT for a search that finds chunks; one more (the namespace's settings version,
    which no row carries then) for a search that finds nothing."""
    expected = 1 if found else 2
    return len(sent) == expected and all(s.lstrip().upper().startswith("SELECT") for s in sent)


@pytest.mark.parametrize("embedded", [False, True], ids=["no-embedder", "lexical-mode"])
def test_a_search_is_one_statement_sync_and_async(database_url: str, embedded: bool) -> None:
    """A lexical search: without an embedder, or with one in the lexical mode."""
    namespace = unique_name("one")
    options: dict[str, Any] = {"mode": "lexical"}
    if embedded:
        options["embed_fn"] = HashingEmbedder(dim=16)
    engine = create_database_engine(database_url)
    try:
        base = KnowledgeBase(engine, namespace, **options)
        empty = KnowledgeBase(engine, f"empty_{namespace}", **options)
        # A lexical search through the local index, once it is built: one statement.
        assert empty.search("refund", 3) == []
        empty.wait_for_index()
        with cursor_statements(engine) as sent:
            assert empty.search("refund", 3) == []
        # The local index reads the generation with the texts: one statement even for none.
        assert one_select(sent, found=not embedded), sent
        base.import_jsonl(CORPUS_LINES)
        base.wait_for_index()
        expected: list[list[Chunk]] = []
        for query, filters in SEARCHES:
            with cursor_statements(engine) as sent:
                expected.append(base.search(query, 4, filters))
            assert one_select(sent, found=bool(expected[-1]) or not embedded), (query, sent)
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
            await base.wait_for_index()
            found = []
            for query, filters in SEARCHES:
                with cursor_statements(async_engine.sync_engine) as sent:
                    found.append((await base.search(query, 4, filters), sent))
            return found
        finally:
            await async_engine.dispose()

    results = asyncio.run(search_async())
    assert [chunks for chunks, _ in results] == expected
    for (query, _), (chunks, sent) in zip(SEARCHES, results, strict=True):
        assert one_select(sent, found=bool(chunks) or not embedded), (query, sent)


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


def test_a_hybrid_search_adds_one_read_of_the_vectors(database_url: str) -> None:
    """The lexical statement, then one transaction: nearest ids and farthest ids (sqlite-vec;
    one scan read in Python without pgvector), then the chunks by id."""
    engine = create_database_engine(database_url)
    try:
        base = KnowledgeBase(engine, unique_name("hy"), embed_fn=HashingEmbedder(dim=16))
        base.import_jsonl(CORPUS_LINES)
        base.vector_backend()  # read once per knowledge base, on its first vector search
        with cursor_statements(engine) as sent:
            assert len(base.search("refund policy", 4)) == 4
        selects = [s for s in sent if s.lstrip().upper().startswith("SELECT")]
        rest = [s.strip().upper() for s in sent if s not in selects]
        assert len(selects) == (4 if engine.dialect.name == "sqlite" else 3), sent
        assert {r.split()[0] for r in rest} <= {"BEGIN", "COMMIT", "ROLLBACK", "SET"}, rest
        with cursor_statements(engine) as sent:
            assert len(base.search("refund policy", 4, mode="vector")) == 4
        selects = [s for s in sent if s.lstrip().upper().startswith("SELECT")]
        assert len(selects) == 2, sent  # no lexical statement, no farthest chunks
    finally:
        engine.dispose()


# PostgreSQL only: SQLite runs in process, with no round trip to count.
@pytest.mark.parametrize(
    "empty_database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_a_search_is_one_round_trip_on_postgres(
    proxied_url: tuple[str, RoundTripProxy],
) -> None:
    url, proxy = proxied_url
    migrate(url)
    namespace = unique_name("wire")
    engine = create_database_engine(url)
    try:
        base = KnowledgeBase(engine, namespace)
        base.import_jsonl(CORPUS_LINES)
        assert base.wait_for_index()
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
            assert await base.wait_for_index()
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

    # One round trip, the search that finds nothing too (the local index reads the
    # generation with the texts; the SQL search would read its settings version apart).
    expected = [1 for _ in SEARCHES * 2]
    assert sync_counts == expected
    assert asyncio.run(count_async()) == expected


def test_statistics_come_with_the_candidates(engine: sa.Engine) -> None:
    """The row carries the namespace's statistics as they were when the statement ran."""
    base = KnowledgeBase(engine, f"st_{uuid.uuid4().hex[:8]}")
    base.import_jsonl(CORPUS_LINES[:6])
    plan = base.plan("refund policy", 3)
    assert plan.statement is not None
    statement, values = plan.statement
    rows = statement.rows(values)
    with engine.connect() as connection:
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
    # Last, the namespace's settings version: none, never configured.
    assert rows and all(tuple(row[-5:-3]) == tuple(stats) for row in rows)
    assert all(row[-1] is None for row in rows)
    assert all(
        {term: f for term, f in zip(("refund", "policy"), row[-3:-1], strict=True) if f is not None}
        == frequencies
        for row in rows
    )
    assert set(frequencies) == {"policy", "refund"}
