"""The pieces every metrics statement is built from, the same on every database: the
filters as conditions, the sums of a set of rows, the percentile walk along a latency
index, and the figures made of what they read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import InstrumentedAttribute

from contextstore.backends.sql.dialects import Dialect, dialect_of
from contextstore.backends.sql.metrics.report import (
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
    interpolate,
)
from contextstore.backends.sql.metrics.validation import aware, checked_text
from contextstore.backends.sql.models import QueryMetricLessonRow, QueryMetricRow
from contextstore.errors import ContextStoreError, ValidationError

__all__ = [
    "COMPOUND_PARTS",
    "EPOCH",
    "JOINED_BUCKETS",
    "QUERY_METRICS",
    "RUN_LESSONS",
    "Group",
    "aggregates",
    "epoch_seconds",
    "filter_conditions",
    "group_sums",
    "make_figures",
    "sum_groups",
    "time_ends",
    "union_rows",
    "walkable",
    "walked_percentiles",
]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


Group = sa.ColumnElement[Any] | InstrumentedAttribute[Any]
"""What rows may be grouped by: a column of the rows' table or an expression over it."""


QUERY_METRICS: Final = cast(sa.Table, QueryMetricRow.__table__)


RUN_LESSONS: Final = cast(sa.Table, QueryMetricLessonRow.__table__)
"""The tables a report reads: the runs, and each run's lessons (with copies of the run's
columns under the same names, so the same conditions and aggregates apply to either)."""


def filter_conditions(
    filters: MetricsFilter,
    dialect: Dialect | str,
    *,
    walking: bool = False,
    rows: sa.Table = QUERY_METRICS,
) -> list[sa.ColumnElement[bool]]:
    """WHERE clauses for ``filters`` over ``rows``, validating them (``ValidationError``
    naming the field). ``dialect``: the database's (``dialect_of``), or its name.

    ``walking``: the time bounds are written as a term the planner may not answer from an
    index (``Dialect.unindexed``: ``+recorded_at`` on SQLite), so a percentile walk steps
    along a latency index instead of sorting the range (see ``walk_conditions``). The same
    rows match.
    """
    conditions: list[sa.ColumnElement[bool]] = []
    database = dialect_of(dialect)
    instant: Any = rows.c.recorded_at
    if walking:
        instant = database.unindexed(rows.c.recorded_at)
    start = None if filters.since is None else aware("since", filters.since)
    end = None if filters.until is None else aware("until", filters.until)
    if start is not None and end is not None and start > end:
        raise ValidationError("since", f"is after until ({start} > {end})")
    if start is not None:
        conditions.append(instant >= start)
    if end is not None:
        conditions.append(instant < end)
    for name in ("namespace", "complexity", "intent"):
        value = getattr(filters, name)
        if value is not None:
            text = checked_text(name, value, limit=None, required=False)
            conditions.append(rows.c[name] == text)
    if filters.worker_prefix:
        prefix = checked_text("worker_prefix", filters.worker_prefix, limit=None, required=False)
        # substr rather than LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
        conditions.append(sa.func.substr(rows.c.worker, 1, len(prefix)) == prefix)
    if filters.cache_hit is not None:
        if not isinstance(filters.cache_hit, bool):
            raise ValidationError(
                "cache_hit", f"must be a bool, got {type(filters.cache_hit).__name__}"
            )
        conditions.append(rows.c.cache_hit.is_(filters.cache_hit))
    if filters.lesson is not None:
        lesson = checked_text("lesson", filters.lesson, limit=None, required=True)
        if rows is QUERY_METRICS:
            conditions.append(
                database.json_array_holds(QUERY_METRICS.c.lessons_included_ids, lesson)
            )
        else:
            # The run's own lesson rows: one of them is this lesson, included.
            named = RUN_LESSONS.alias("named")
            conditions.append(
                sa.exists().where(
                    named.c.metric_id == rows.c.metric_id,
                    named.c.lesson_id == lesson,
                    named.c.included,
                )
            )
    return conditions


JOINED_BUCKETS = 2000
"""Most buckets a series reads as time ranges of the index; a longer one computes each row's."""


COMPOUND_PARTS = 400
"""Most SELECTs one UNION ALL joins (SQLite refuses more than 500 by default)."""


def union_rows(connection: sa.Connection, parts: Sequence[sa.Select[Any]]) -> list[sa.RowMapping]:
    """The rows of ``parts`` joined by UNION ALL, ``COMPOUND_PARTS`` SELECTs per statement."""
    rows: list[sa.RowMapping] = []
    for begin in range(0, len(parts), COMPOUND_PARTS):
        chunk = parts[begin : begin + COMPOUND_PARTS]
        statement = chunk[0] if len(chunk) == 1 else sa.union_all(*chunk)
        rows.extend(connection.execute(statement).mappings())
    return rows


def epoch_seconds(instant: datetime) -> int:
    """Whole seconds since the Unix epoch, floored (so a bucket index floors too)."""
    return (aware("instant", instant) - EPOCH) // timedelta(seconds=1)


def aggregates(rows: sa.Table = QUERY_METRICS) -> list[sa.ColumnElement[Any]]:
    """count, sums and first/last of the selected rows, as aggregates."""
    row = rows.c
    return [
        sa.func.count().label("n"),
        sa.func.sum(row.context_length).label("context_total"),
        sa.func.sum(sa.case((row.guard_passed, 0), else_=1)).label("guard_failures"),
        sa.func.sum(sa.case((row.cache_hit, 1), else_=0)).label("cache_hits"),
        sa.func.sum(row.lessons_matched).label("matched_total"),
        sa.func.sum(row.lessons_included).label("included_total"),
        sa.func.min(row.recorded_at).label("first_at"),
        sa.func.max(row.recorded_at).label("last_at"),
    ]


def walkable(filters: MetricsFilter) -> bool:
    """Whether percentiles under ``filters`` may be walked along the latency indexes.

    A lesson filter is answered only from the rows' traces, which no index holds: walking
    would read a row per step, so such reports sort the matching rows instead.
    """
    return filters.lesson is None


def sum_groups(rows: Sequence[Mapping[Any, Any]]) -> dict[str, Any]:
    """The sums of the union of disjoint groups, from each group's sums."""
    totals = (
        "n",
        "context_total",
        "guard_failures",
        "cache_hits",
        "matched_total",
        "included_total",
    )
    added: dict[str, Any] = {name: sum(int(row[name]) for row in rows) for name in totals}
    added["first_at"] = min(row["first_at"] for row in rows)
    added["last_at"] = max(row["last_at"] for row in rows)
    return added


def group_sums(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    rows: sa.Table = QUERY_METRICS,
) -> dict[Any, sa.RowMapping]:
    """count, sums and first/last per value of ``group``: one GROUP BY, no sort of values."""
    key = (sa.null() if group is None else group).label("g")
    statement = sa.select(key, *aggregates(rows)).select_from(rows).where(*conditions)
    if group is not None:
        statement = statement.group_by(group)
    return {row["g"]: row for row in connection.execute(statement).mappings() if row["n"]}


def walked_percentiles(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    counts: dict[Any, int],
    *,
    narrow: Callable[[Any], Sequence[sa.ColumnElement[bool]]] | None = None,
    rows: sa.Table = QUERY_METRICS,
) -> dict[Any, tuple[float, ...]]:
    """``PERCENTILES`` per group of ``counts`` (group value → rows), read along an index.

    A group's rows are those of ``conditions`` with ``group`` equal to its key, or, given
    ``narrow``, with ``narrow(key)``'s conditions too.

    One statement: for each group and fraction, the (at most) two rows around the
    percentile's position, as ``ORDER BY response_ms LIMIT 2 OFFSET k`` from the nearer end
    (a descending walk for the high ranks, so p99 steps over 1% of the rows, not 99%).
    Values at consecutive ranks are ordered, so sorting the two found gives their ranks.
    """
    parts: list[sa.Select[Any]] = []
    wanted: list[tuple[Any, int, int]] = []  # per part: group key, first rank, count
    for group_key, count in counts.items():
        for fraction in PERCENTILES:
            first = math.floor(fraction * (count - 1))
            taken = min(2, count - first)
            descending = first > (count - 1) / 2
            offset = count - first - taken if descending else first
            order = rows.c.response_ms.desc() if descending else rows.c.response_ms
            if narrow is not None:
                narrowed = [*conditions, *narrow(group_key)]
            elif group is None:
                narrowed = list(conditions)
            else:
                narrowed = [*conditions, group == group_key]
            walk = (
                sa.select(rows.c.response_ms.label("v"))
                .select_from(rows)
                .where(*narrowed)
                .order_by(order)
                .limit(taken)
                .offset(offset)
                .subquery(f"walk_{len(parts)}")
            )
            parts.append(sa.select(sa.literal(len(parts), sa.Integer()).label("part"), walk.c.v))
            wanted.append((group_key, first, taken))
    found: dict[int, list[float]] = {}
    if parts:
        for part, value in connection.execute(sa.union_all(*parts)).all():
            found.setdefault(int(part), []).append(float(value))
    ranks: dict[Any, dict[int, float]] = {}
    for part, (group_key, first, taken) in enumerate(wanted):
        values = sorted(found.get(part, ()))
        if len(values) != taken:
            raise ContextStoreError("metrics changed while a report read them")
        ranks.setdefault(group_key, {}).update(
            {first + step: value for step, value in enumerate(values)}
        )
    return {
        group_key: tuple(interpolate(ranks[group_key], count, f) for f in PERCENTILES)
        for group_key, count in counts.items()
    }


def make_figures(row: Mapping[Any, Any], percentiles: Sequence[float | None]) -> MetricsFigures:
    # Means and rates are integer sums divided here, not AVG() in SQL: PostgreSQL's AVG of an
    # integer is NUMERIC and SQLite's a double, and they could differ in the last digit.
    runs = int(row["n"])
    matched = int(row["matched_total"])
    included = int(row["included_total"])
    p50, p95, p99 = (None if value is None else float(value) for value in percentiles)
    return MetricsFigures(
        runs=runs,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        mean_context_length=int(row["context_total"]) / runs,
        guard_failure_rate=int(row["guard_failures"]) / runs,
        cache_hit_rate=int(row["cache_hits"]) / runs,
        lessons_matched_total=matched,
        lessons_matched_mean=matched / runs,
        lessons_included_total=included,
        lessons_included_mean=included / runs,
        first_recorded_at=row["first_at"],
        last_recorded_at=row["last_at"],
    )


def time_ends(conditions: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """The first and last ``recorded_at`` under ``conditions``, each its own subquery: SQLite
    reads a lone min() or max() from one end of an index, but scans for both together."""
    row = QueryMetricRow
    first = sa.select(sa.func.min(row.recorded_at)).where(*conditions).scalar_subquery()
    last = sa.select(sa.func.max(row.recorded_at)).where(*conditions).scalar_subquery()
    return sa.select(
        sa.type_coerce(first, row.recorded_at.type), sa.type_coerce(last, row.recorded_at.type)
    )
