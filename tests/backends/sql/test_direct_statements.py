"""A run's statements on the driver connection (``backends.sql.direct``): what they send,
what comes back, and what happens when the server drops the pool's connections."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore import connect, connect_async
from contextstore.backends.sql.direct import DirectStatement
from contextstore.core.matching import Scope
from contextstore.core.metrics import QueryMetric
from contextstore.errors import BackendUnavailableError, ValidationError
from contextstore.sample_data import load_lessons
from tests.factories import make_metric


def metric(**fields: Any) -> QueryMetric:
    return make_metric(datetime.now(UTC), **fields)


SCOPE = Scope(entity_ids=("nw.prod.support.mena.me-central.agent-03",), tags=("support",))


def tagged(url: str, name: str) -> str:
    """``url`` whose connections carry ``application_name=name`` (to find them server-side)."""
    return (
        sa.make_url(url)
        .update_query_dict({"application_name": name})
        .render_as_string(hide_password=False)
    )


def terminate(url: str, name: str) -> int:
    """Drop every server connection named ``name``, as a restart would; how many."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            return len(
                connection.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": name},
                ).all()
            )
    finally:
        admin.dispose()


def test_values_reach_the_driver_converted_as_connection_execute_converts_them(
    database_url: str, namespace: str
) -> None:
    with connect(database_url, "", namespace) as store:
        store.metrics.record(metric(namespace=namespace, guard_warnings=("a", "é")))
        with store.sql_engine.connect() as connection:
            row = connection.execute(
                sa.text("SELECT guard_warnings, guard_passed FROM query_metrics")
            ).one()
        statement = DirectStatement(store.sql_engine, sa.text("SELECT :a AS a, :b AS b"))
        assert statement.rows({"b": "two", "a": 1}) == [(1, "two")]
    stored = row[0] if isinstance(row[0], list) else json.loads(row[0])
    assert stored == ["a", "é"] and bool(row[1]) is True


def test_a_refused_row_is_a_validation_error_and_nothing_is_written(
    database_url: str, namespace: str
) -> None:
    with connect(database_url, "", namespace) as store:
        statement = DirectStatement(
            store.sql_engine,
            sa.text(
                "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES (:l, 'k', 0)"
            ),
        )
        with pytest.raises(sa.exc.IntegrityError):  # no such lesson: the foreign key refuses
            statement.execute({"l": "missing.lesson"})
        with pytest.raises(ValidationError):
            store.metrics.record(metric(namespace=namespace, complexity="huge"))
        assert store.metrics.count() == 0
        # The connection went back to the pool usable: the next statement works.
        assert DirectStatement(store.sql_engine, sa.text("SELECT 1")).rows({}) == [(1,)]


@pytest.mark.postgres
def test_a_dropped_server_connection_fails_one_call_then_the_whole_pool_is_renewed(
    postgres_server_url: str, namespace: str
) -> None:
    name = f"cs-direct-{uuid.uuid4().hex[:8]}"
    with connect(tagged(postgres_server_url, name), "", namespace) as store:
        store.lessons.import_records(load_lessons())
        expected = store.lessons.candidates(SCOPE)
        held = [store.sql_engine.raw_connection() for _ in range(3)]  # three pooled connections
        for proxy in held:
            proxy.close()
        assert terminate(postgres_server_url, name) == 3
        with pytest.raises(BackendUnavailableError):
            store.lessons.candidates(SCOPE)
        # The other two dead connections were invalidated with the first: no call fails again.
        assert [store.lessons.candidates(SCOPE) for _ in range(3)] == [expected] * 3
        for _ in range(3):
            store.metrics.record(metric(namespace=namespace))
        assert store.metrics.count(namespace=namespace) == 3


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_the_async_store_renews_both_its_pools_after_one_failed_direct_call(
    postgres_server_url: str, namespace: str
) -> None:
    name = f"cs-direct-{uuid.uuid4().hex[:8]}"
    async with connect_async(tagged(postgres_server_url, name), "", namespace) as store:
        await store.lessons.import_records(load_lessons())  # bridged: the engine's pool
        expected = await store.lessons.candidates(SCOPE)  # direct: the driver pool
        # A read and a write at once: two driver connections, besides the engine pool's.
        await asyncio.gather(
            store.lessons.candidates(SCOPE), store.metrics.record(metric(namespace=namespace))
        )
        bridged = store.sql_engine.pool.checkedin()
        assert bridged >= 1
        assert terminate(postgres_server_url, name) == 2 + bridged
        with pytest.raises(BackendUnavailableError):
            await store.lessons.candidates(SCOPE)
        # The other dead connections were replaced, the engine pool's too: nothing fails again.
        assert [await store.lessons.candidates(SCOPE) for _ in range(3)] == [expected] * 3
        await store.metrics.record(metric(namespace=namespace))
        assert await store.metrics.count(namespace=namespace) == 2


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_a_disconnect_seen_by_a_bridged_call_renews_the_driver_pool_too(
    postgres_server_url: str, namespace: str
) -> None:
    name = f"cs-direct-{uuid.uuid4().hex[:8]}"
    async with connect_async(tagged(postgres_server_url, name), "", namespace) as store:
        await store.lessons.import_records(load_lessons())
        expected = await store.lessons.candidates(SCOPE)
        await asyncio.gather(*(store.metrics.record(metric(namespace=namespace)) for _ in range(3)))
        assert terminate(postgres_server_url, name) >= 2
        with pytest.raises(BackendUnavailableError):
            await store.metrics.count(namespace=namespace)  # bridged
        assert await store.lessons.candidates(SCOPE) == expected  # direct
        await store.metrics.record(metric(namespace=namespace))
        assert await store.metrics.count(namespace=namespace) == 4
