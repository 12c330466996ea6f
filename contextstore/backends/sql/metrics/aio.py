"""``AsyncMetricsRepository``: ``MetricsRepository`` awaited on an event loop
(``backends.sql.bridge``), its rows of concurrent records group-committed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Final, Unpack

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from contextstore.backends.batching import Batcher
from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.bridge import Bridge, Ready, async_sleep
from contextstore.backends.sql.errors import translate_metrics_error
from contextstore.backends.sql.metrics.report import (
    GroupRow,
    LessonStats,
    MetricsFilter,
    MetricsFilterFields,
    MetricsReport,
    SeriesPoint,
)
from contextstore.backends.sql.metrics.repository import MetricsRepository, rows_parameters
from contextstore.core.filters import Instant
from contextstore.core.metrics import QueryMetric
from contextstore.errors import BackendUnavailableError

__all__ = ["ROWS_PER_INSERT", "AsyncMetricsRepository"]

ROWS_PER_INSERT: Final = 64
"""Most metrics rows one group-committed INSERT carries (PostgreSQL binds at most 65,535
parameters, SQLite 32,766; a row binds 22)."""


class AsyncMetricsRepository(Bridge[MetricsRepository]):
    """``MetricsRepository`` awaited: the same methods, arguments, results and errors.

    ``record`` validates the metric (``ValidationError`` naming the field, nothing written)
    and returns once its row is durable. The rows of records awaited at the same time are
    group-committed: one INSERT, one commit (``contextstore.backends.batching``). With
    ``pool`` (PostgreSQL), that INSERT is sent on the driver directly. Implements the async
    metrics sink the ``AsyncContextEngine`` writes to. ``namespace`` binds it to one
    namespace, as ``MetricsRepository`` describes.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        namespace: str | None = None,
        clock: Callable[[], datetime] | None = None,
        ready: Ready | None = None,
        pool: DriverPool | None = None,
    ) -> None:
        options: dict[str, Any] = {"sleep": async_sleep, "namespace": namespace}
        if clock is not None:
            options["clock"] = clock
        super().__init__(MetricsRepository(engine.sync_engine, **options), ready)
        self._pool = pool
        # A refused batch is written again a row at a time (only the refused rows' callers
        # fail); an unreachable database fails the batch.
        self._commits: Batcher[dict[str, Any], None] = Batcher(
            self._insert_rows,
            limit=ROWS_PER_INSERT,
            alone=lambda error: not isinstance(error, BackendUnavailableError),
        )

    @property
    def namespace(self) -> str | None:
        """The namespace this repository is bound to; ``None`` when it spans the database."""
        return self._target.namespace

    @property
    def target(self) -> MetricsRepository:
        """The sync ``MetricsRepository`` whose calls this one awaits."""
        return self._target

    async def scoped(self, namespace: str | None, all_namespaces: bool = False) -> str | None:
        """The namespace a call covers (``MetricsRepository.scoped``)."""
        return await self._run(self._target.scoped, namespace, all_namespaces)

    async def cutoff(self, older_than: Instant) -> datetime:
        """The instant ``prune(older_than)`` deletes before (aware UTC)."""
        return await self._run(self._target.cutoff, older_than)

    async def record(self, metric: QueryMetric) -> None:
        values = self._target.row_values(metric)
        if self._ready is not None:
            await self._ready()
        await self._commits.submit(values)

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> list[None]:
        target = self._target
        if self._pool is None:
            await greenlet_spawn(target.insert_rows, rows)
            return [None] * len(rows)
        insert = target.rows_insert(tuple(rows[0]), len(rows))
        try:
            await self._pool.execute(insert, rows_parameters(rows))
        except sa.exc.SQLAlchemyError as error:
            raise translate_metrics_error(error) from error
        return [None] * len(rows)

    async def record_many(self, metrics: Iterable[QueryMetric]) -> int:
        return await self._run(self._target.record_many, list(metrics))

    async def prune(
        self, older_than: Instant, namespace: str | None = None, *, all_namespaces: bool = False
    ) -> int:
        return await self._run(
            self._target.prune, older_than, namespace, all_namespaces=all_namespaces
        )

    async def span(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> tuple[datetime, datetime] | tuple[None, None]:
        return await self._run(
            self._target.span, namespace=namespace, all_namespaces=all_namespaces
        )

    async def count(
        self,
        filters: MetricsFilter | None = None,
        *,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> int:
        return await self._run(self._target.count, filters, all_namespaces=all_namespaces, **fields)

    async def report(
        self,
        filters: MetricsFilter | None = None,
        *,
        by: str | None = None,
        levels: bool = True,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> MetricsReport:
        return await self._run(
            self._target.report,
            filters,
            by=by,
            levels=levels,
            all_namespaces=all_namespaces,
            **fields,
        )

    async def groups(
        self,
        by: str,
        filters: MetricsFilter | None = None,
        *,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> tuple[GroupRow, ...]:
        return await self._run(
            self._target.groups, by, filters, all_namespaces=all_namespaces, **fields
        )

    async def series(
        self,
        filters: MetricsFilter | None = None,
        *,
        bucket_seconds: int = 3600,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> tuple[SeriesPoint, ...]:
        return await self._run(
            self._target.series,
            filters,
            bucket_seconds=bucket_seconds,
            all_namespaces=all_namespaces,
            **fields,
        )

    async def lesson_stats(
        self,
        *,
        since: Instant | None = None,
        until: Instant | None = None,
        namespace: str | None = None,
        all_namespaces: bool = False,
    ) -> LessonStats:
        return await self._run(
            self._target.lesson_stats,
            since=since,
            until=until,
            namespace=namespace,
            all_namespaces=all_namespaces,
        )
