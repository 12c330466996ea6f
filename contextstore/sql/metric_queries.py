"""The statements that summarise ``query_metrics`` rows into ``MetricsFigures``.

PostgreSQL computes the percentiles in SQL with ``percentile_cont``; other databases (SQLite)
rank the rows with window functions in SQL, fetch only the two rows around each percentile's
position and interpolate here with PostgreSQL's own arithmetic (IEEE doubles,
``contextstore.sql.report.interpolate``), so both give the same figures for the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import InstrumentedAttribute

from contextstore.errors import ValidationError
from contextstore.sql.metric_validation import aware, checked_text
from contextstore.sql.models import QueryMetricRow
from contextstore.sql.report import (
    GROUPINGS,
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
    interpolate,
)
from contextstore.sql.trace_queries import contains, unnest

__all__ = ["Group", "bucket_index", "filter_conditions", "grouped_figures", "grouping"]

Group = sa.ColumnElement[Any] | InstrumentedAttribute[Any]
"""What rows may be grouped by: a column of ``QueryMetricRow`` or an expression over it."""


def filter_conditions(filters: MetricsFilter, dialect: str) -> list[sa.ColumnElement[bool]]:
    """WHERE clauses for ``filters``, validating them (``ValidationError`` naming the field)."""
    conditions: list[sa.ColumnElement[bool]] = []
    start = None if filters.since is None else aware("since", filters.since)
    end = None if filters.until is None else aware("until", filters.until)
    if start is not None and end is not None and start > end:
        raise ValidationError("since", f"is after until ({start} > {end})")
    if start is not None:
        conditions.append(QueryMetricRow.recorded_at >= start)
    if end is not None:
        conditions.append(QueryMetricRow.recorded_at < end)
    for name in ("namespace", "complexity", "intent"):
        value = getattr(filters, name)
        if value is not None:
            text = checked_text(name, value, limit=None, required=False)
            conditions.append(getattr(QueryMetricRow, name) == text)
    if filters.worker_prefix:
        prefix = checked_text("worker_prefix", filters.worker_prefix, limit=None, required=False)
        # substr rather than LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
        conditions.append(sa.func.substr(QueryMetricRow.worker, 1, len(prefix)) == prefix)
    if filters.cache_hit is not None:
        if not isinstance(filters.cache_hit, bool):
            raise ValidationError(
                "cache_hit", f"must be a bool, got {type(filters.cache_hit).__name__}"
            )
        conditions.append(QueryMetricRow.cache_hit.is_(filters.cache_hit))
    if filters.lesson is not None:
        lesson = checked_text("lesson", filters.lesson, limit=None, required=True)
        conditions.append(contains(dialect, QueryMetricRow.lessons_included_ids, lesson))
    return conditions


def grouping(dialect: str, by: str) -> tuple[Group, sa.FromClause | None]:
    """What ``report(by=...)`` groups on, and the FROM it needs (``None``: the table alone)."""
    if by == "lesson":
        each = unnest(dialect, QueryMetricRow.lessons_included_ids, "lesson_each")
        return each.c.value, sa.join(QueryMetricRow, each, sa.true())
    if by in ("complexity", "intent", "worker"):
        return getattr(QueryMetricRow, by), None
    raise ValidationError("by", f"must be one of {', '.join(GROUPINGS)}, got {by!r}")


def bucket_index(dialect: str, bucket_seconds: int) -> sa.ColumnElement[int]:
    """``floor(epoch_seconds(recorded_at) / bucket_seconds)`` as an integer, per dialect."""
    if dialect == "postgresql":
        epoch = sa.extract("epoch", QueryMetricRow.recorded_at)
        return sa.cast(
            sa.func.floor(sa.cast(epoch, sa.Numeric()) / sa.literal(bucket_seconds, sa.Numeric())),
            sa.BigInteger(),
        )
    # SQLite keeps naive UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'. The fraction is cut off
    # before strftime, which would round it to milliseconds (23:59:59.9999 → the next day);
    # whole seconds floor to the same bucket as the exact instant since bucket_seconds is
    # whole. Floor division is spelled out so instants before 1970 floor, not truncate.
    whole_seconds = sa.func.substr(QueryMetricRow.recorded_at, 1, 19)
    seconds = sa.cast(sa.func.strftime("%s", whole_seconds), sa.Integer())
    size = sa.literal(bucket_seconds, sa.Integer())
    return (seconds - ((seconds % size) + size) % size) // size


def _aggregates(group: Group | None, *, window: bool) -> list[sa.ColumnElement[Any]]:
    """count, sums and first/last: as aggregates, or as window functions over ``group``."""
    row = QueryMetricRow
    columns: list[tuple[str, sa.FunctionElement[Any]]] = [
        ("n", sa.func.count()),
        ("context_total", sa.func.sum(row.context_length)),
        ("guard_failures", sa.func.sum(sa.case((row.guard_passed, 0), else_=1))),
        ("cache_hits", sa.func.sum(sa.case((row.cache_hit, 1), else_=0))),
        ("matched_total", sa.func.sum(row.lessons_matched)),
        ("included_total", sa.func.sum(row.lessons_included)),
        ("first_at", sa.func.min(row.recorded_at)),
        ("last_at", sa.func.max(row.recorded_at)),
    ]
    if not window:
        return [function.label(name) for name, function in columns]
    return [function.over(partition_by=group).label(name) for name, function in columns]


def grouped_figures(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    source: sa.FromClause | None = None,
) -> dict[Any, MetricsFigures]:
    """Figures per value of ``group`` (key ``None`` when ungrouped); groups without rows absent.

    ``source`` replaces ``query_metrics`` as the FROM (a join that unnests a trace array).
    Each dialect path is a single statement, so the counts and the percentiles of a group
    always describe the same rows.
    """
    key = (sa.null() if group is None else group).label("g")
    if connection.dialect.name == "postgresql":
        # One ordered-set aggregate over an array of fractions sorts each group once; three
        # scalar percentile_cont calls would sort it three times (same arithmetic either way).
        fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
        percentiles = sa.func.percentile_cont(fractions).within_group(QueryMetricRow.response_ms)
        statement = sa.select(
            key,
            *_aggregates(group, window=False),
            sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float())).label("p"),
        ).where(*conditions)
        if source is not None:
            statement = statement.select_from(source)
        if group is not None:
            statement = statement.group_by(group)
        results: dict[Any, MetricsFigures] = {}
        for row in connection.execute(statement).mappings():
            if row["n"]:
                values = tuple(row["p"])
                results[row["g"]] = _make_figures(row, values)
        return results
    return _figures_windowed(connection, conditions, group, key, source)


def _figures_windowed(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    key: sa.Label[Any],
    source: sa.FromClause | None,
) -> dict[Any, MetricsFigures]:
    """Percentiles without ``percentile_cont``: rank in SQL, fetch only the needed ranks."""
    rank = sa.func.row_number().over(partition_by=group, order_by=QueryMetricRow.response_ms)
    inner = sa.select(
        key,
        QueryMetricRow.response_ms.label("v"),
        (rank - 1).label("rk"),
        *_aggregates(group, window=True),
    ).where(*conditions)
    if source is not None:
        inner = inner.select_from(source)
    ranked = inner.subquery()
    # Rank 0 always, so every non-empty group yields a row carrying its aggregates; then the
    # two ranks around each percentile's position. CAST truncates, i.e. floors (rk ≥ 0).
    wanted = [ranked.c.rk == 0]
    for fraction in PERCENTILES:
        first = sa.cast(sa.literal(fraction, sa.Float()) * (ranked.c.n - 1), sa.Integer())
        wanted.append(ranked.c.rk.between(first, first + 1))
    statement = sa.select(ranked).where(sa.or_(*wanted))
    rows: dict[Any, tuple[sa.RowMapping, dict[int, float]]] = {}
    for row in connection.execute(statement).mappings():
        _, ranks = rows.setdefault(row["g"], (row, {}))
        ranks[int(row["rk"])] = float(row["v"])
    results: dict[Any, MetricsFigures] = {}
    for group_key, (row, ranks) in rows.items():
        count = int(row["n"])
        values = tuple(interpolate(ranks, count, fraction) for fraction in PERCENTILES)
        results[group_key] = _make_figures(row, values)
    return results


def _make_figures(row: sa.RowMapping, percentiles: Sequence[float | None]) -> MetricsFigures:
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
