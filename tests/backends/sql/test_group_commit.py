"""The async metrics repository group-commits the rows of concurrent records, on SQLite and
PostgreSQL: every row written once, each caller answered for its own row."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from benchmarks.wire import RoundTripProxy
from contextstore import connect_async
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.metrics import QueryMetric
from contextstore.errors import BackendUnavailableError, ContextStoreError, ValidationError
from tests.backends.sql.conftest import POSTGRES_ONLY
from tests.factories import make_metric

pytestmark = pytest.mark.asyncio


def metric(namespace: str, **fields: Any) -> QueryMetric:
    return make_metric(datetime.now(UTC), namespace=namespace, **fields)


def counting_inserts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of each INSERT the repositories compile and send, in order."""
    sizes: list[int] = []
    rows_insert = MetricsRepository.rows_insert

    def counted(self: MetricsRepository, keys: tuple[str, ...], count: int) -> Any:
        sizes.append(count)
        return rows_insert(self, keys, count)

    monkeypatch.setattr(MetricsRepository, "rows_insert", counted)
    return sizes


async def test_concurrent_records_share_statements_and_every_row_lands_once(
    database_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect_async(database_url, "", namespace) as store:
        await store.metrics.record(metric(namespace, worker="first"))
        sizes = counting_inserts(monkeypatch)
        await asyncio.gather(
            *(store.metrics.record(metric(namespace, worker=f"w-{i}")) for i in range(150))
        )
        assert await store.metrics.count(namespace=namespace) == 151
    # All 150 were queued in one loop turn, before the first statement went out: statements
    # of at most 64 rows, in order.
    assert sizes == [64, 64, 22]
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            workers = connection.execute(
                sa.text("SELECT worker FROM query_metrics WHERE namespace = :ns"), {"ns": namespace}
            ).scalars()
            assert sorted(workers) == sorted(["first", *(f"w-{i}" for i in range(150))])
    finally:
        engine.dispose()


async def test_a_bad_metric_fails_its_own_caller_before_anything_is_queued(
    database_url: str, namespace: str
) -> None:
    async with connect_async(database_url, "", namespace) as store:
        results = await asyncio.gather(
            store.metrics.record(metric(namespace)),
            store.metrics.record(metric(namespace, complexity="huge")),
            store.metrics.record(metric(namespace)),
            return_exceptions=True,
        )
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], ValidationError) and results[1].field == "complexity"
        assert await store.metrics.count(namespace=namespace) == 2


async def test_a_row_the_database_refuses_fails_only_its_caller(
    database_url: str, namespace: str
) -> None:
    async with connect_async(database_url, "", namespace) as store:
        await store.metrics.count()  # migrated
        engine = sa.create_engine(database_url)
        try:
            with engine.begin() as connection:  # an administrator's rule, typed by hand
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        sa.text(
                            "ALTER TABLE query_metrics ADD CONSTRAINT no_banned "
                            "CHECK (worker <> 'banned')"
                        )
                    )
                else:
                    connection.execute(
                        sa.text(
                            "CREATE TRIGGER no_banned BEFORE INSERT ON query_metrics "
                            "WHEN NEW.worker = 'banned' "
                            "BEGIN SELECT RAISE(ABORT, 'banned worker'); END"
                        )
                    )
        finally:
            engine.dispose()
        workers = ["a", "banned", "b", "c", "banned", "d"]
        results = await asyncio.gather(
            *(store.metrics.record(metric(namespace, worker=worker)) for worker in workers),
            return_exceptions=True,
        )
        refused = [isinstance(result, ContextStoreError) for result in results]
        assert refused == [worker == "banned" for worker in workers]
        assert all(result is None for result, bad in zip(results, refused, strict=True) if not bad)
        assert await store.metrics.count(namespace=namespace) == 4


async def test_a_lone_record_is_one_statement_of_one_row(
    database_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect_async(database_url, "", namespace) as store:
        sizes = counting_inserts(monkeypatch)
        for _ in range(3):
            await store.metrics.record(metric(namespace))
        assert sizes == [1, 1, 1]
        assert await store.metrics.count(namespace=namespace) == 3


@POSTGRES_ONLY
async def test_an_unreachable_database_fails_the_batch_without_retrying_each_row(
    database_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sa.make_url(database_url)
    with RoundTripProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        async with connect_async(through, "", namespace) as store:
            await store.metrics.record(metric(namespace, worker="before"))
            proxy.close()  # the database is gone: connections cut, new ones refused
            sizes = counting_inserts(monkeypatch)
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(store.metrics.record(metric(namespace, worker=f"w-{i}")) for i in range(8)),
                    return_exceptions=True,
                ),
                timeout=60,
            )
    assert all(isinstance(result, BackendUnavailableError) for result in results), results
    # All eight were queued in one loop turn: one batch, failed whole, no row sent again alone.
    assert sizes == [8]
