"""PostgreSQL's metrics strategies: ``percentile_cont`` in SQL, sorting each group (or
bucket) once, in memory; walks along the latency indexes only where the visibility map
makes them cheap (``walks_pay``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from contextstore.backends.sql.metrics.figures import (
    JOINED_BUCKETS,
    QUERY_METRICS,
    Group,
    aggregates,
    epoch_seconds,
    group_sums,
    make_figures,
    sum_groups,
)
from contextstore.backends.sql.metrics.report import (
    COMPLEXITY_ORDER,
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
)
from contextstore.backends.sql.metrics.strategy import Figures, LevelsReport, MetricsStrategy
from contextstore.backends.sql.models import QueryMetricRow

__all__ = ["VISIBLE_TO_WALK", "PostgreSQLMetrics", "lateral_series"]


class PostgreSQLMetrics(MetricsStrategy):
    def walks_pay(self, connection: sa.Connection, rows: sa.Table = QUERY_METRICS) -> bool:
        visible, pages = connection.execute(_VISIBILITY, {"table": rows.name}).one()
        return bool(pages) and visible >= VISIBLE_TO_WALK * pages

    def walk_conditions(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        rows: sa.Table,
    ) -> list[sa.ColumnElement[bool]]:
        return list(conditions)  # the planner's statistics pick the index

    def unwalked_figures(
        self,
        connection: sa.Connection,
        conditions: Sequence[sa.ColumnElement[bool]],
        group: Group | None,
        rows: sa.Table,
    ) -> Figures:
        if group is not None:
            return _gathered_figures(connection, conditions, group, rows)
        # One ordered-set aggregate over an array of fractions sorts the rows once; three
        # scalar percentile_cont calls would sort them three times (same arithmetic).
        statement = sa.select(
            sa.null().label("g"), *aggregates(rows), _percentiles(rows.c.response_ms).label("p")
        ).where(*conditions)
        return {
            row["g"]: make_figures(row, tuple(row["p"]))
            for row in connection.execute(statement).mappings()
            if row["n"]
        }

    def levels_report(
        self, connection: sa.Connection, conditions: Sequence[sa.ColumnElement[bool]]
    ) -> LevelsReport | None:
        return _sorted_report(connection, conditions)

    def series(
        self,
        connection: sa.Connection,
        filters: MetricsFilter,
        conditions: Sequence[sa.ColumnElement[bool]],
        first: datetime,
        last: datetime,
        bucket_seconds: int,
    ) -> Figures | None:
        return lateral_series(connection, conditions, first, last, bucket_seconds)

    def bucket_index(self, bucket_seconds: int) -> sa.ColumnElement[int]:
        epoch = sa.extract("epoch", QueryMetricRow.recorded_at)
        return sa.cast(
            sa.func.floor(sa.cast(epoch, sa.Numeric()) / sa.literal(bucket_seconds, sa.Numeric())),
            sa.BigInteger(),
        )


def _percentiles(values: Any, where: Any = None) -> sa.ColumnElement[Any]:
    """``PERCENTILES`` of ``values`` as one ``percentile_cont`` over an array of fractions
    (of the rows ``where`` keeps, when given)."""
    fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
    percentiles: Any = sa.func.percentile_cont(fractions).within_group(values)
    if where is not None:
        percentiles = percentiles.filter(where)
    return sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float()))


def _buckets(first: datetime, last: datetime, bucket_seconds: int) -> sa.CTE | None:
    """The bucket indexes from ``first``'s to ``last``'s as a table (column ``i``), or
    ``None`` when there would be more than ``JOINED_BUCKETS``."""
    start = epoch_seconds(first) // bucket_seconds
    end = epoch_seconds(last) // bucket_seconds
    if end - start + 1 > JOINED_BUCKETS:
        return None
    seed = sa.select(sa.literal(start, sa.BigInteger()).label("i")).cte("buckets", recursive=True)
    return seed.union_all(sa.select(seed.c.i + 1).where(seed.c.i < end))


def lateral_series(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    first: datetime,
    last: datetime,
    bucket_seconds: int,
) -> dict[Any, MetricsFigures] | None:
    """PostgreSQL: figures per bucket index, each bucket a LATERAL aggregate over its own
    time range of ``ix_query_metrics_time``; ``None`` when there would be too many buckets.

    ``percentile_cont`` then sorts one bucket at a time, in memory, instead of the whole
    range being sorted by a computed bucket and then each group again.
    """
    buckets = _buckets(first, last, bucket_seconds)
    if buckets is None:
        return None
    size = sa.literal(bucket_seconds, sa.BigInteger())
    row = QueryMetricRow.recorded_at
    figures = (
        sa.select(*aggregates(), _percentiles(QueryMetricRow.response_ms).label("p"))
        .where(
            *conditions,
            row >= sa.func.to_timestamp(buckets.c.i * size),
            row < sa.func.to_timestamp((buckets.c.i + 1) * size),
        )
        .lateral("figures")
    )
    statement = (
        sa.select(buckets.c.i.label("g"), figures)
        .select_from(buckets.join(figures, sa.true()))
        .where(figures.c.n > 0)
    )
    return {
        found["g"]: make_figures(found, tuple(found["p"]))
        for found in connection.execute(statement).mappings()
    }


def _gathered_figures(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group,
    rows: sa.Table,
) -> dict[Any, MetricsFigures]:
    """PostgreSQL, not walking: each group's sums and its response times as an array, from
    one hash aggregate over one scan; then each group's ``percentile_cont`` over its array.

    ``percentile_cont`` in the GROUP BY itself would need its input sorted by group (an
    ordered-set aggregate cannot be hashed): the planner then reads the rows in group order
    along an index led by the group — a random heap read per row on a table not yet
    vacuumed — or sorts them all before each group sorts its own again. An array per group
    is the same values, so the same figures; only each group's own sort remains.
    """
    gathered = (
        sa.select(
            group.label("g"),
            *aggregates(rows),
            sa.func.array_agg(rows.c.response_ms).label("times"),
        )
        .select_from(rows)
        .where(*conditions)
        .group_by(group)
        .subquery("gathered")
    )
    each = sa.func.unnest(gathered.c.times).table_valued("time").render_derived(name="each")
    fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
    percentiles = (
        sa.select(sa.func.percentile_cont(fractions).within_group(each.c.time))
        .select_from(each)
        .scalar_subquery()
    )
    statement = sa.select(
        *(column for column in gathered.c if column.name != "times"),
        sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float())).label("p"),
    )
    return {
        row["g"]: make_figures(row, tuple(row["p"]))
        for row in connection.execute(statement).mappings()
        if row["n"]
    }


VISIBLE_TO_WALK = 0.9
"""Least share of a table's pages PostgreSQL must know all-visible for a walk over it."""


_VISIBILITY = sa.text(
    "SELECT relallvisible, relpages FROM pg_class WHERE oid = CAST(:table AS regclass)"
)


def _sorted_report(
    connection: sa.Connection, conditions: Sequence[sa.ColumnElement[bool]]
) -> tuple[MetricsFigures | None, dict[Any, MetricsFigures]]:
    """PostgreSQL, not walking: the overall and per-complexity figures from two scans.

    One GROUP BY complexity gives each level's sums (a parallel scan and hash aggregate);
    the overall sums are theirs added up. One more scan sorts: the whole range's and each
    level's ``percentile_cont``, a level's with ``FILTER (WHERE complexity = …)``, each
    sorting its own response times in memory, and nothing sorts the rows by level first.
    A level other than ``low``, ``medium`` and ``high`` (typed by hand in SQL) sends the
    report to ``_rolled_up_report``, which groups whatever levels it finds.
    """
    level = QueryMetricRow.complexity
    sums = group_sums(connection, conditions, level)
    if not sums:
        return None, {}
    if set(sums) - set(COMPLEXITY_ORDER):
        return _rolled_up_report(connection, conditions)
    values = QueryMetricRow.response_ms
    columns = [_percentiles(values), *(_percentiles(values, level == key) for key in sums)]
    found = connection.execute(sa.select(*columns).where(*conditions)).one()
    overall = make_figures(sum_groups(list(sums.values())), tuple(found[0]))
    grouped = {
        key: make_figures(row, tuple(found[index + 1]))
        for index, (key, row) in enumerate(sums.items())
    }
    return overall, grouped


def _rolled_up_report(
    connection: sa.Connection, conditions: Sequence[sa.ColumnElement[bool]]
) -> tuple[MetricsFigures | None, dict[Any, MetricsFigures]]:
    """``_sorted_report`` for any set of levels: one ``GROUP BY ROLLUP`` scan.

    The level is grouped ``COLLATE "C"`` (bytes, so the same groups): no index is in that
    order, so PostgreSQL scans the table instead of walking an index a random page read per
    row; then it sorts the rows by level, and each group's ``percentile_cont`` its own.
    """
    level = QueryMetricRow.complexity.collate("C")
    statement = (
        sa.select(
            level.label("g"),
            sa.func.grouping(level).label("whole"),
            *aggregates(),
            _percentiles(QueryMetricRow.response_ms).label("p"),
        )
        .where(*conditions)
        .group_by(sa.func.rollup(level))
    )
    overall: MetricsFigures | None = None
    grouped: dict[Any, MetricsFigures] = {}
    for row in connection.execute(statement).mappings():
        if not row["n"]:
            continue
        figures = make_figures(row, tuple(row["p"]))
        if row["whole"]:
            overall = figures
        else:
            grouped[row["g"]] = figures
    return overall, grouped
