"""Where the databases summarise metrics differently: one interface, a SQLite and a
PostgreSQL implementation (``metrics.sqlite``, ``metrics.postgresql``), chosen once per
connection's dialect by ``metrics.queries.strategy_of``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from contextstore.backends.sql.metrics.figures import QUERY_METRICS, Group
from contextstore.backends.sql.metrics.report import MetricsFigures, MetricsFilter

__all__ = ["Figures", "LevelsReport", "MetricsStrategy"]

Figures = dict[Any, MetricsFigures]
LevelsReport = tuple[MetricsFigures | None, Figures]


class MetricsStrategy(ABC):
    """How one database computes what ``metrics.queries`` plans."""

    @abstractmethod
    def walks_pay(self, connection: sa.Connection, rows: sa.Table = QUERY_METRICS) -> bool:
        """Whether walking the latency indexes of ``rows`` beats sorting them, now."""

    @abstractmethod
    def walk_conditions(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        rows: sa.Table,
    ) -> list[sa.ColumnElement[bool]]:
        """The conditions a percentile walk over the rows of ``conditions`` filters on."""

    @abstractmethod
    def unwalked_figures(
        self,
        connection: sa.Connection,
        conditions: Sequence[sa.ColumnElement[bool]],
        group: Group | None,
        rows: sa.Table,
    ) -> Figures:
        """Figures per value of ``group`` with the percentiles sorted, not walked."""

    @abstractmethod
    def levels_report(
        self, connection: sa.Connection, conditions: Sequence[sa.ColumnElement[bool]]
    ) -> LevelsReport | None:
        """The overall and per-complexity figures, not walked, when this database has a
        cheaper way than two ``grouped_figures`` calls; ``None`` otherwise."""

    @abstractmethod
    def series(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        first: datetime,
        last: datetime,
        bucket_seconds: int,
    ) -> Figures | None:
        """Figures per bucket index, each bucket read as its own time range; ``None`` when
        there would be too many buckets (the caller groups by ``bucket_index``)."""

    @abstractmethod
    def bucket_index(self, bucket_seconds: int) -> sa.ColumnElement[int]:
        """``floor(epoch_seconds(recorded_at) / bucket_seconds)`` as an integer."""
