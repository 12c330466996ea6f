"""An awaited search plans off the event loop: the query's analysis and the building and
compiling of its statement run in a worker thread; the compiled statements are bounded.

A 64-term statement takes tens of milliseconds to build and compile (more on a loaded
machine); on the loop it held every other request that long. Asserted on the threads the
work ran in, not on a clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge import index as knowledge_index
from contextstore.backends.sql.knowledge import queries as knowledge_queries
from contextstore.backends.sql.knowledge import search as knowledge_search
from contextstore.backends.sql.knowledge.queries import MAX_CACHED_SEARCHES, SearchStatements

LINES = [
    json.dumps(
        {
            "source": f"d{i}.md",
            "text": " ".join(f"w{(i * 7 + j) % 500}" for j in range(30)),
            "metadata": {"k": "a"},
        }
    )
    for i in range(40)
]


def test_an_awaited_search_builds_its_statement_off_the_loop(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = f"off_{uuid.uuid4().hex[:8]}"
    engine = create_database_engine(database_url)
    try:
        KnowledgeBase(engine, namespace).import_jsonl(LINES)
        query = " ".join(f"w{i}" for i in range(20_000))
        expected = KnowledgeBase(engine, namespace).search(query, 3, {"k": ["a", 1]})
    finally:
        engine.dispose()
    threads: dict[str, set[int]] = {"analysis": set(), "build": set()}
    analyse, build = knowledge_search.weighted_query_terms, knowledge_queries.search_template

    def analysing(analyzer: Any, text: str) -> tuple[tuple[str, int], ...]:
        threads["analysis"].add(threading.get_ident())
        return analyse(analyzer, text)

    def building(*args: Any) -> sa.Select[Any]:
        threads["build"].add(threading.get_ident())
        return build(*args)

    monkeypatch.setattr(knowledge_search, "weighted_query_terms", analysing)
    monkeypatch.setattr(knowledge_queries, "search_template", building)

    async def search() -> tuple[list[Any], int]:
        async_engine = create_async_database_engine(database_url)
        try:
            base = AsyncKnowledgeBase(async_engine, namespace, local_index=False)
            return await base.search(query, 3, {"k": ["a", 1]}), threading.get_ident()
        finally:
            await async_engine.dispose()

    found, loop_thread = asyncio.run(search())
    assert found == expected and len(found) == 3
    assert threads["analysis"] and loop_thread not in threads["analysis"]
    assert threads["build"] and loop_thread not in threads["build"]


def test_an_awaited_search_builds_its_local_index_off_the_loop(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = f"off_{uuid.uuid4().hex[:8]}"
    engine = create_database_engine(database_url)
    try:
        KnowledgeBase(engine, namespace).import_jsonl(LINES)
        query = " ".join(f"w{i}" for i in range(20_000))
        expected = KnowledgeBase(engine, namespace).search(query, 3, {"k": ["a", 1]})
    finally:
        engine.dispose()
    threads: dict[str, set[int]] = {"analysis": set(), "build": set()}
    analyse, build = knowledge_search.weighted_query_terms, knowledge_index.snapshot_from_rows

    def analysing(*args: Any) -> Any:
        threads["analysis"].add(threading.get_ident())
        return analyse(*args)

    def building(*args: Any) -> Any:
        threads["build"].add(threading.get_ident())
        return build(*args)

    monkeypatch.setattr(knowledge_search, "weighted_query_terms", analysing)
    monkeypatch.setattr(knowledge_index, "snapshot_from_rows", building)

    async def search() -> tuple[list[Any], int]:
        async_engine = create_async_database_engine(database_url)
        try:
            base = AsyncKnowledgeBase(async_engine, namespace)
            # Ranked in SQL while the index is built in the background; then by the index.
            first = await base.search(query, 3, {"k": ["a", 1]})
            assert await base.wait_for_index()
            assert base.target.local is not None and base.target.local.builds == 1
            assert await base.search(query, 3, {"k": ["a", 1]}) == first
            return first, threading.get_ident()
        finally:
            await async_engine.dispose()

    found, loop_thread = asyncio.run(search())
    assert found == expected and len(found) == 3
    assert threads["analysis"] and loop_thread not in threads["analysis"]
    assert threads["build"] and loop_thread not in threads["build"]


def test_compiled_searches_are_bounded_least_recently_used_first(database_url: str) -> None:
    engine = create_database_engine(database_url)
    try:
        statements = SearchStatements(engine, size=3)
        first = statements.get((1, (), False))
        assert statements.get((1, (), False)) is first  # compiled once, then kept
        statements.get((2, (), False))
        statements.get((3, (), False))
        statements.get((1, (), False))  # used again: now the most recent
        statements.get((4, (), False))  # drops the least recently used, (2, (), False)
        assert len(statements) == 3
        assert statements.get((1, (), False)) is first
        assert len(statements) == 3
        assert SearchStatements(engine).size == MAX_CACHED_SEARCHES
    finally:
        engine.dispose()
