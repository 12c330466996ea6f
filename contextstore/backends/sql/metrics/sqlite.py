"""SQLite's metrics strategies: no ``percentile_cont`` and no histogram statistics, so the
rows are ranked with window functions and only the ranks around each percentile fetched,
and wide ranges and day buckets are walked along the latency indexes; the percentiles are
interpolated here with PostgreSQL's own arithmetic (``report.interpolate``), so both
databases give the same figures for the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from contextstore.backends.sql.dialects import SQLiteDialect
from contextstore.backends.sql.metrics.figures import (
    COMPOUND_PARTS,
    EPOCH,
    JOINED_BUCKETS,
    QUERY_METRICS,
    Group,
    aggregates,
    epoch_seconds,
    filter_conditions,
    group_sums,
    make_figures,
    time_ends,
    union_rows,
    walkable,
    walked_percentiles,
)
from contextstore.backends.sql.metrics.report import (
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
    interpolate,
)
from contextstore.backends.sql.metrics.strategy import Figures, LevelsReport, MetricsStrategy
from contextstore.backends.sql.metrics.validation import aware
from contextstore.backends.sql.models import QueryMetricRow

__all__ = ["DAY", "DAY_PARTS", "WALKED_BUCKETS", "WIDE_SHARE", "SQLiteMetrics", "ranged_series"]

SQLITE = SQLiteDialect()


class SQLiteMetrics(MetricsStrategy):
    def walks_pay(self, connection: sa.Connection, rows: sa.Table = QUERY_METRICS) -> bool:
        return True  # SQLite reads a covering index alone

    def walk_conditions(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        rows: sa.Table,
    ) -> list[sa.ColumnElement[bool]]:
        bounded = filters.since is not None or filters.until is not None
        if bounded and _wide_range(connection, filters):
            return filter_conditions(filters, SQLITE, walking=True, rows=rows)
        return list(conditions)

    def unwalked_figures(
        self,
        connection: sa.Connection,
        conditions: Sequence[sa.ColumnElement[bool]],
        group: Group | None,
        rows: sa.Table,
    ) -> Figures:
        key = (sa.null() if group is None else group).label("g")
        sums = group_sums(connection, conditions, group, rows)
        ranked = _ranked(connection, conditions, group, key, rows)
        return {
            group_key: make_figures(
                row,
                tuple(interpolate(ranked[group_key], int(row["n"]), f) for f in PERCENTILES),
            )
            for group_key, row in sums.items()
        }

    def levels_report(
        self, connection: sa.Connection, conditions: Sequence[sa.ColumnElement[bool]]
    ) -> LevelsReport | None:
        return None

    def series(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        first: datetime,
        last: datetime,
        bucket_seconds: int,
    ) -> Figures | None:
        return ranged_series(connection, filters, first, last, bucket_seconds)

    def bucket_index(self, bucket_seconds: int) -> sa.ColumnElement[int]:
        # SQLite keeps naive UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'. The fraction is cut off
        # before strftime, which would round it to milliseconds (23:59:59.9999 → the next
        # day); whole seconds floor to the same bucket as the exact instant since
        # bucket_seconds is whole. Floor division is spelled out so instants before 1970
        # floor, not truncate.
        whole_seconds = sa.func.substr(QueryMetricRow.recorded_at, 1, 19)
        seconds = sa.cast(sa.func.strftime("%s", whole_seconds), sa.Integer())
        size = sa.literal(bucket_seconds, sa.Integer())
        return (seconds - ((seconds % size) + size) % size) // size


WIDE_SHARE = 0.25
"""Least share of the rows a time range must hold for SQLite to walk it along a latency index."""


def _wide_range(connection: sa.Connection, filters: MetricsFilter) -> bool:
    """SQLite, a time-bounded range: whether it holds at least ``WIDE_SHARE`` of the rows
    without its bounds, so a walk along a latency index steps over few rows it does not keep
    (see ``walk_conditions``)."""
    unbounded = filter_conditions(replace(filters, since=None, until=None), SQLITE)
    first, last = connection.execute(time_ends(unbounded)).one()
    if first is None or last is None:
        return False
    start = first if filters.since is None else max(first, aware("since", filters.since))
    stop = last if filters.until is None else min(last, aware("until", filters.until))
    whole = (last - first).total_seconds()
    share = (stop - start).total_seconds() / whole if whole > 0 else 1.0
    return share >= WIDE_SHARE


def ranged_series(
    connection: sa.Connection,
    filters: MetricsFilter,
    first: datetime,
    last: datetime,
    bucket_seconds: int,
) -> dict[Any, MetricsFigures] | None:
    """SQLite: figures per bucket index, each bucket read as its own time range of the
    covering ``recorded_at`` index; ``None`` when there would be more than ``JOINED_BUCKETS``.

    Each bucket's bounds are clamped to ``since``/``until`` here, so each range is the only
    one on ``recorded_at`` (SQLite narrows an index by one lower and one upper bound: given
    the filter's too, it may scan the whole filtered range once per bucket). One statement
    sums every bucket; one more ranks each bucket apart, a window over that bucket's rows
    alone keeping only the ranks its percentiles need, so each sort is one bucket's rather
    than one window partitioned over the whole range, which SQLite sorts as a whole first.
    """
    start = epoch_seconds(first) // bucket_seconds
    end = epoch_seconds(last) // bucket_seconds
    if end - start + 1 > JOINED_BUCKETS:
        return None
    unbounded = filter_conditions(replace(filters, since=None, until=None), SQLITE)
    row = QueryMetricRow.recorded_at
    size = timedelta(seconds=bucket_seconds)

    def bucket(index: int) -> list[sa.ColumnElement[bool]]:
        low = EPOCH + index * size
        high = low + size
        if filters.since is not None:
            low = max(low, aware("since", filters.since))
        if filters.until is not None:
            high = min(high, aware("until", filters.until))
        return [*unbounded, row >= low, row < high]

    def index_of(index: int) -> sa.ColumnElement[int]:
        return sa.literal(index, sa.BigInteger()).label("g")

    sums = {
        found["g"]: found
        for found in union_rows(
            connection,
            [
                sa.select(index_of(index), *aggregates()).where(*bucket(index))
                for index in range(start, end + 1)
            ],
        )
        if found["n"]
    }
    if DAY % bucket_seconds == 0 and DAY // bucket_seconds <= DAY_PARTS and walkable(filters):
        return _day_walks(connection, filters, sums, bucket_seconds)
    parts: list[sa.Select[Any]] = []
    for index, found in sums.items():
        count = int(found["n"])
        positions = [fraction * (count - 1) for fraction in PERCENTILES]
        wanted = sorted({rank for at in positions for rank in (math.floor(at), math.ceil(at))})
        ranked = (
            sa.select(
                QueryMetricRow.response_ms.label("v"),
                (sa.func.row_number().over(order_by=QueryMetricRow.response_ms) - 1).label("rk"),
            )
            .where(*bucket(int(index)))
            .subquery(f"bucket_{len(parts) % COMPOUND_PARTS}")
        )
        parts.append(
            sa.select(index_of(int(index)), ranked.c.rk, ranked.c.v).where(ranked.c.rk.in_(wanted))
        )
    ranks: dict[Any, dict[int, float]] = {}
    for found in union_rows(connection, parts):
        ranks.setdefault(found["g"], {})[int(found["rk"])] = float(found["v"])
    return {
        index: make_figures(
            found,
            tuple(interpolate(ranks[index], int(found["n"]), fraction) for fraction in PERCENTILES),
        )
        for index, found in sums.items()
    }


DAY = 86400
"""A day bucket's length: SQLite walks such buckets along ``ix_query_metrics_day_latency``."""


def _day_of() -> sa.ColumnElement[Any]:
    """SQLite: the UTC day of ``recorded_at`` (``YYYY-MM-DD``), spelled exactly as the index
    ``ix_query_metrics_day_latency`` (revision 0008) is, with literal arguments, so the
    planner matches the two."""
    day: sa.ColumnElement[Any] = sa.func.substr(
        QueryMetricRow.recorded_at, sa.literal_column("1"), sa.literal_column("10")
    )
    return day


DAY_PARTS = 8
"""Most buckets a day may be cut into for them to be walked along the day index (3 hours):
a bucket's walk steps over its whole day's entries, so a median over at most this many
times the bucket's own rows, still far cheaper than sorting them."""


WALKED_BUCKETS = COMPOUND_PARTS // len(PERCENTILES)
"""Most buckets one statement walks (each bucket one SELECT per percentile)."""


def _day_text(day: datetime) -> str:
    """``YYYY-MM-DD`` as SQLite stores it (the year always four digits)."""
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def _day_walks(
    connection: sa.Connection,
    filters: MetricsFilter,
    sums: Mapping[Any, Mapping[Any, Any]],
    bucket_seconds: int,
) -> dict[Any, MetricsFigures]:
    """SQLite, buckets of a day or a part of one: each bucket's percentiles walked along
    the day index (its day's entries in response-time order), with no sort.

    Every time bound is written ``+recorded_at`` (``filter_conditions(walking=True)``), so
    that the day, not a range, picks the index: a bucket shorter than a day, or a day cut by
    ``since`` or ``until``, filters its day's entries by those bounds as it walks them.
    """
    walking = filter_conditions(filters, SQLITE, walking=True)
    size = timedelta(seconds=bucket_seconds)
    instant = SQLITE.unindexed(QUERY_METRICS.c.recorded_at)

    def narrow(index: Any) -> list[sa.ColumnElement[bool]]:
        start = EPOCH + int(index) * size
        within = [_day_of() == _day_text(start)]
        if bucket_seconds < DAY:
            within += [instant >= start, instant < start + size]
        return within

    indexes = list(sums)
    figures: dict[Any, MetricsFigures] = {}
    for begin in range(0, len(indexes), WALKED_BUCKETS):
        chunk = indexes[begin : begin + WALKED_BUCKETS]
        counts = {index: int(sums[index]["n"]) for index in chunk}
        ranks = walked_percentiles(connection, walking, None, counts, narrow=narrow)
        figures.update({index: make_figures(sums[index], ranks[index]) for index in chunk})
    return figures


def _ranked(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    key: sa.Label[Any],
    rows: sa.Table,
) -> dict[Any, dict[int, float]]:
    """Percentiles without ``percentile_cont``: rank in SQL, fetch only the needed ranks.

    Only the group, the value, its rank and the group's size are windowed; the sums come
    from a plain GROUP BY (``_sums``), far cheaper than a window aggregate per column.
    """
    rank = sa.func.row_number().over(partition_by=group, order_by=rows.c.response_ms)
    inner = (
        sa.select(
            key,
            rows.c.response_ms.label("v"),
            (rank - 1).label("rk"),
            sa.func.count().over(partition_by=group).label("n"),
        )
        .select_from(rows)
        .where(*conditions)
    )
    ranked = inner.subquery()
    # The two ranks around each percentile's position. CAST truncates, i.e. floors (rk ≥ 0).
    wanted = []
    for fraction in PERCENTILES:
        first = sa.cast(sa.literal(fraction, sa.Float()) * (ranked.c.n - 1), sa.Integer())
        wanted.append(ranked.c.rk.between(first, first + 1))
    statement = sa.select(ranked.c.g, ranked.c.rk, ranked.c.v).where(sa.or_(*wanted))
    ranks: dict[Any, dict[int, float]] = {}
    for row in connection.execute(statement).mappings():
        ranks.setdefault(row["g"], {})[int(row["rk"])] = float(row["v"])
    return ranks
