"""Concurrent candidate reads of the async store answered by one statement (PostgreSQL's
direct path): each caller gets exactly what its own read returns alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextstore import connect_async
from contextstore.backends.sql.async_direct import DriverPool
from contextstore.core.matching import Scope
from contextstore.sample_data import load_demo_queries, load_lessons

pytestmark = pytest.mark.asyncio

SCOPES = [
    *(item.scope for item in load_demo_queries()),
    Scope(),  # no keys: no lesson, and no statement of its own
    Scope(tags=("no-such-tag",)),
    Scope(entity_ids=("nw",), tags=("support", "billing")),
]


def counting_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    rows = DriverPool.rows

    async def counted(self: DriverPool, statement: Any, values: Any) -> list[Any]:
        sent.append(statement.sql)
        return await rows(self, statement, values)

    monkeypatch.setattr(DriverPool, "rows", counted)
    return sent


async def test_concurrent_reads_get_each_their_own_lessons(
    database_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect_async(database_url, "", namespace) as store:
        await store.lessons.import_records(load_lessons())
        alone = [await store.lessons.candidates(scope) for scope in SCOPES]
        assert any(alone) and not alone[len(SCOPES) - 3]
        sent = counting_statements(monkeypatch)
        together = await asyncio.gather(*(store.lessons.candidates(scope) for scope in SCOPES))
        assert together == alone
        if store.sql_engine.dialect.name == "postgresql":
            assert len(sent) == 1  # every scope with keys, in one statement

        joint = store.run_reads
        await store.knowledge.add("A document bumps the generation.", "doc.md")
        generation = await store.knowledge.generation()
        assert generation >= 1
        expected = [(lessons, generation) for lessons in alone]
        sent.clear()
        found = await asyncio.gather(*(joint.candidates_with_generation(s) for s in SCOPES))
        assert found == expected
        if store.sql_engine.dialect.name == "postgresql":
            assert len(sent) == 1
