"""The statements that summarise ``query_metrics`` rows into ``MetricsFigures``.

PostgreSQL computes the percentiles in SQL with ``percentile_cont``; other databases (SQLite)
rank the rows with window functions in SQL, fetch only the two rows around each percentile's
position and interpolate here with PostgreSQL's own arithmetic (IEEE doubles,
``contextstore.sql.report.interpolate``), so both give the same figures for the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import InstrumentedAttribute

from contextstore.errors import ContextStoreError, ValidationError
from contextstore.sql.metric_validation import aware, checked_text
from contextstore.sql.models import QueryMetricLessonRow, QueryMetricRow
from contextstore.sql.report import (
    COMPLEXITY_ORDER,
    GROUPINGS,
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
    interpolate,
)
from contextstore.sql.trace_queries import contains

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

__all__ = [
    "QUERY_METRICS",
    "RUN_LESSONS",
    "WALK_GROUPS",
    "Group",
    "Grouping",
    "bucket_index",
    "filter_conditions",
    "grouped_figures",
    "grouping",
    "lateral_series",
    "ranged_series",
    "report_figures",
    "walk_conditions",
    "walkable",
    "walked_percentiles",
    "walks_pay",
]

Group = sa.ColumnElement[Any] | InstrumentedAttribute[Any]
"""What rows may be grouped by: a column of the rows' table or an expression over it."""

QUERY_METRICS: Final = cast(sa.Table, QueryMetricRow.__table__)
RUN_LESSONS: Final = cast(sa.Table, QueryMetricLessonRow.__table__)
"""The tables a report reads: the runs, and each run's lessons (with copies of the run's
columns under the same names, so the same conditions and aggregates apply to either)."""


def filter_conditions(
    filters: MetricsFilter, dialect: str, *, walking: bool = False, rows: sa.Table = QUERY_METRICS
) -> list[sa.ColumnElement[bool]]:
    """WHERE clauses for ``filters`` over ``rows``, validating them (``ValidationError``
    naming the field).

    ``walking`` (SQLite): the time bounds are written ``+recorded_at``, which SQLite's
    planner may not answer from an index (its documented way to disqualify a term), so a
    percentile walk steps along a latency index instead of sorting the range (see
    ``walk_conditions``). The same rows match.
    """
    conditions: list[sa.ColumnElement[bool]] = []
    instant: Any = rows.c.recorded_at
    if walking and dialect == "sqlite":
        instant = _unindexed_instant(rows)
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
            conditions.append(contains(dialect, QUERY_METRICS.c.lessons_included_ids, lesson))
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


def _unindexed_instant(rows: sa.Table) -> sa.ColumnElement[Any]:
    """SQLite: ``+recorded_at``, the instant as a term the planner may not answer from an index."""
    return sa.type_coerce(
        sa.literal_column(f"+{rows.name}.recorded_at"), QueryMetricRow.recorded_at.type
    )


WIDE_SHARE = 0.25
"""Least share of the rows a time range must hold for SQLite to walk it along a latency index."""


def walk_conditions(
    connection: sa.Connection,
    filters: MetricsFilter,
    conditions: Sequence[sa.ColumnElement[bool]],
    rows: sa.Table = QUERY_METRICS,
) -> list[sa.ColumnElement[bool]]:
    """The conditions a percentile walk filters on (the rows of ``conditions``, over ``rows``).

    SQLite cannot tell how many rows a time range holds (it is built without the histogram
    statistics), and given both ``since`` and ``until`` it guesses few: it reads the range
    from the time index and sorts it, once per percentile — seconds over a wide range. A
    walk along a latency index steps over about ``rank / share`` entries instead. So, with
    a time bound, the range's share of the rows is estimated as its share of the time
    between the first and the last row without it (each read from one end of the time
    index): at least ``WIDE_SHARE``, the walk is forced (``filter_conditions(walking=True)``);
    less, the planner's sort of the few is cheaper. The estimate only picks the plan: the
    figures are the same either way.
    """
    bounded = filters.since is not None or filters.until is not None
    if connection.dialect.name == "sqlite" and bounded and _wide_range(connection, filters):
        return filter_conditions(filters, "sqlite", walking=True, rows=rows)
    return list(conditions)


def _wide_range(connection: sa.Connection, filters: MetricsFilter) -> bool:
    """SQLite, a time-bounded range: whether it holds at least ``WIDE_SHARE`` of the rows
    without its bounds, so a walk along a latency index steps over few rows it does not keep
    (see ``walk_conditions``)."""
    unbounded = filter_conditions(replace(filters, since=None, until=None), "sqlite")
    row = QueryMetricRow.recorded_at

    def end(edge: Any) -> sa.ScalarSelect[Any]:
        return sa.select(edge(row)).where(*unbounded).scalar_subquery()

    first, last = connection.execute(
        sa.select(
            sa.type_coerce(end(sa.func.min), row.type), sa.type_coerce(end(sa.func.max), row.type)
        )
    ).one()
    if first is None or last is None:
        return False
    start = first if filters.since is None else max(first, aware("since", filters.since))
    stop = last if filters.until is None else min(last, aware("until", filters.until))
    whole = (last - first).total_seconds()
    share = (stop - start).total_seconds() / whole if whole > 0 else 1.0
    return share >= WIDE_SHARE


@dataclass(frozen=True)
class Grouping:
    """What ``report(by=...)`` groups: ``key`` over the rows of ``rows`` that ``where`` keeps
    (besides the report's filters)."""

    key: Group
    rows: sa.Table
    where: tuple[sa.ColumnElement[bool], ...] = ()


def grouping(by: str) -> Grouping:
    """What ``report(by=...)`` groups on: a lesson's runs are its rows in ``RUN_LESSONS``
    that include it; the others are a column of the runs."""
    if by == "lesson":
        return Grouping(RUN_LESSONS.c.lesson_id, RUN_LESSONS, (RUN_LESSONS.c.included,))
    if by in ("complexity", "intent", "worker"):
        return Grouping(QUERY_METRICS.c[by], QUERY_METRICS)
    raise ValidationError("by", f"must be one of {', '.join(GROUPINGS)}, got {by!r}")


def grouping_figures(
    connection: sa.Connection, filters: MetricsFilter, chosen: Grouping
) -> dict[Any, MetricsFigures]:
    """The figures per group of ``chosen`` of the rows ``filters`` select (``grouped_figures``).

    The groups walk their percentiles when ``walkable`` and ``walks_pay`` (for the grouped
    table) allow. A group leading its own index walks it over any range: its walk steps
    over that group's entries alone, each filtered by the range as it goes, so on SQLite the
    time bounds are always written ``+recorded_at`` (``filter_conditions(walking=True)``),
    keeping the planner on that index rather than sorting the range once per percentile.
    """
    dialect = connection.dialect.name
    rows = chosen.rows
    selected = filter_conditions(filters, dialect, rows=rows)
    conditions = [*selected, *chosen.where]
    walk = walkable(filters) and walks_pay(connection, rows)
    walk_on = None
    if walk and _walked_index(chosen.key) == OWN_INDEX:
        walk_on = [*filter_conditions(filters, dialect, walking=True, rows=rows), *chosen.where]
    elif walk:
        walk_on = [*walk_conditions(connection, filters, selected, rows), *chosen.where]
    return grouped_figures(
        connection, conditions, chosen.key, rows=rows, walk=walk, walk_on=walk_on
    )


JOINED_BUCKETS = 2000
"""Most buckets a series reads as time ranges of the index; a longer one computes each row's."""


def _buckets(first: datetime, last: datetime, bucket_seconds: int) -> sa.CTE | None:
    """The bucket indexes from ``first``'s to ``last``'s as a table (column ``i``), or
    ``None`` when there would be more than ``JOINED_BUCKETS``."""
    start = _epoch_seconds(first) // bucket_seconds
    end = _epoch_seconds(last) // bucket_seconds
    if end - start + 1 > JOINED_BUCKETS:
        return None
    seed = sa.select(sa.literal(start, sa.BigInteger()).label("i")).cte("buckets", recursive=True)
    return seed.union_all(sa.select(seed.c.i + 1).where(seed.c.i < end))


COMPOUND_PARTS = 400
"""Most SELECTs one UNION ALL joins (SQLite refuses more than 500 by default)."""


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
    start = _epoch_seconds(first) // bucket_seconds
    end = _epoch_seconds(last) // bucket_seconds
    if end - start + 1 > JOINED_BUCKETS:
        return None
    unbounded = filter_conditions(replace(filters, since=None, until=None), "sqlite")
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
        for found in _union_rows(
            connection,
            [
                sa.select(index_of(index), *_aggregates()).where(*bucket(index))
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
    for found in _union_rows(connection, parts):
        ranks.setdefault(found["g"], {})[int(found["rk"])] = float(found["v"])
    return {
        index: _make_figures(
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
    walking = filter_conditions(filters, "sqlite", walking=True)
    size = timedelta(seconds=bucket_seconds)
    instant = _unindexed_instant(QUERY_METRICS)

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
        figures.update({index: _make_figures(sums[index], ranks[index]) for index in chunk})
    return figures


def _union_rows(connection: sa.Connection, parts: Sequence[sa.Select[Any]]) -> list[sa.RowMapping]:
    """The rows of ``parts`` joined by UNION ALL, ``COMPOUND_PARTS`` SELECTs per statement."""
    rows: list[sa.RowMapping] = []
    for begin in range(0, len(parts), COMPOUND_PARTS):
        chunk = parts[begin : begin + COMPOUND_PARTS]
        statement = chunk[0] if len(chunk) == 1 else sa.union_all(*chunk)
        rows.extend(connection.execute(statement).mappings())
    return rows


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
    fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
    percentiles = sa.func.percentile_cont(fractions).within_group(QueryMetricRow.response_ms)
    figures = (
        sa.select(
            *_aggregates(), sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float())).label("p")
        )
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
        found["g"]: _make_figures(found, tuple(found["p"]))
        for found in connection.execute(statement).mappings()
    }


def _epoch_seconds(instant: datetime) -> int:
    """Whole seconds since the Unix epoch, floored (so a bucket index floors too)."""
    return (aware("instant", instant) - EPOCH) // timedelta(seconds=1)


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


def _aggregates(rows: sa.Table = QUERY_METRICS) -> list[sa.ColumnElement[Any]]:
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


WALK_GROUPS = 8
"""Most groups whose percentiles are read by walking an index the group does not lead (each
walk steps over every group's rows); more are sorted. A group leading its own index walks
however many."""


def walkable(filters: MetricsFilter) -> bool:
    """Whether percentiles under ``filters`` may be walked along the latency indexes.

    A lesson filter is answered only from the rows' traces, which no index holds: walking
    would read a row per step, so such reports sort the matching rows instead.
    """
    return filters.lesson is None


def _sendable(key: Any) -> bool:
    """Whether ``key`` can be bound as a statement parameter (str keys must encode as UTF-8)."""
    if not isinstance(key, str):
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def grouped_figures(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    *,
    rows: sa.Table = QUERY_METRICS,
    walk: bool = False,
    walk_on: Sequence[sa.ColumnElement[bool]] | None = None,
) -> dict[Any, MetricsFigures]:
    """Figures per value of ``group`` (key ``None`` when ungrouped) over the rows of ``rows``
    that ``conditions`` select; groups without rows absent.

    Call it inside one read transaction (a snapshot): the sums and the percentiles may be
    read by separate statements, and must describe the same rows.

    ``walk`` (see ``walkable``): when ``group`` is ``None`` or a column an index holds in
    response-time order, each percentile is read as the rows at its rank along the index
    (``ORDER BY response_ms LIMIT 2 OFFSET k``, from whichever end is nearer), with no
    sort: any number of groups when the group leads its own index (each walk steps over its
    own group's entries), else at most ``WALK_GROUPS`` (each steps over every group's).
    Otherwise PostgreSQL sorts each group's response times (``_gathered_figures``) and
    other databases rank the rows with a window function.
    """
    walked_index = _walked_index(group)
    if walk and (group is None or walked_index is not None):
        sums = _sums(connection, conditions, group, rows)
        few = len(sums) <= WALK_GROUPS or walked_index == OWN_INDEX
        # A walk sends each group's key back as a parameter; a key holding bytes that are
        # not UTF-8 (typed into SQLite by hand) cannot be sent, so those groups are ranked.
        if few and all(_sendable(key) for key in sums):
            ranks = walked_percentiles(
                connection,
                conditions if walk_on is None else walk_on,
                group,
                {key: int(row["n"]) for key, row in sums.items()},
                rows=rows,
            )
            return {key: _make_figures(row, ranks[key]) for key, row in sums.items()}
    key = (sa.null() if group is None else group).label("g")
    if connection.dialect.name == "postgresql" and group is not None:
        return _gathered_figures(connection, conditions, group, rows)
    if connection.dialect.name == "postgresql":
        # One ordered-set aggregate over an array of fractions sorts each group once; three
        # scalar percentile_cont calls would sort it three times (same arithmetic either way).
        fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
        percentiles = sa.func.percentile_cont(fractions).within_group(rows.c.response_ms)
        statement = sa.select(
            key,
            *_aggregates(rows),
            sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float())).label("p"),
        ).where(*conditions)
        if group is not None:
            statement = statement.group_by(group)
        results: dict[Any, MetricsFigures] = {}
        for row in connection.execute(statement).mappings():
            if row["n"]:
                values = tuple(row["p"])
                results[row["g"]] = _make_figures(row, values)
        return results
    sums = _sums(connection, conditions, group, rows)
    ranked = _ranked(connection, conditions, group, key, rows)
    return {
        group_key: _make_figures(
            row,
            tuple(
                interpolate(ranked[group_key], int(row["n"]), fraction) for fraction in PERCENTILES
            ),
        )
        for group_key, row in sums.items()
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
            *_aggregates(rows),
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
        row["g"]: _make_figures(row, tuple(row["p"]))
        for row in connection.execute(statement).mappings()
        if row["n"]
    }


def report_figures(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    *,
    walk: bool,
    walk_on: Sequence[sa.ColumnElement[bool]] | None = None,
    levels: bool = True,
) -> tuple[MetricsFigures | None, dict[Any, MetricsFigures]]:
    """The overall figures of the selected rows (``None`` without rows) and per complexity
    (``{}`` unless ``levels``).

    Walked (see ``grouped_figures``): one GROUP BY complexity gives the sums of every level,
    the overall sums are theirs added up (the levels partition the rows), and one statement
    walks the overall and per-level percentiles. Otherwise two ``grouped_figures`` calls.
    Without ``levels``, one ``grouped_figures`` call: on PostgreSQL not walking, one scan
    that sums and sorts the range once, where the levels would sort it four times.
    """
    level = QueryMetricRow.complexity
    if not levels:
        ungrouped = grouped_figures(connection, conditions, None, walk=walk, walk_on=walk_on)
        return ungrouped.get(None), {}
    if not walk and connection.dialect.name == "postgresql":
        return _sorted_report(connection, conditions)
    if walk:
        sums = _sums(connection, conditions, level)
        if len(sums) <= WALK_GROUPS:
            counts = {key: int(row["n"]) for key, row in sums.items()}
            walked = conditions if walk_on is None else walk_on
            ranks = walked_percentiles(connection, walked, level, counts)
            grouped = {key: _make_figures(row, ranks[key]) for key, row in sums.items()}
            if not sums:
                return None, grouped
            total = _added(list(sums.values()))
            overall = walked_percentiles(connection, walked, None, {None: int(total["n"])})
            return _make_figures(total, overall[None]), grouped
    overall_figures = grouped_figures(connection, conditions, None).get(None)
    return overall_figures, grouped_figures(connection, conditions, level)


VISIBLE_TO_WALK = 0.9
"""Least share of a table's pages PostgreSQL must know all-visible for a walk over it."""


def walks_pay(connection: sa.Connection, rows: sa.Table = QUERY_METRICS) -> bool:
    """Whether walking the latency indexes of ``rows`` beats sorting the rows, on this
    database now.

    SQLite reads a covering index alone: always. PostgreSQL's index-only scan reads a row's
    page as well, at random, unless the visibility map marks that page all-visible — which
    VACUUM does (autovacuum, by default, once inserts reach 20% of the table). A walk over
    rows written since is a random read per step, several times slower than one sequential
    scan and an in-memory sort, so PostgreSQL walks only when ``pg_class`` (kept by VACUUM
    and ANALYZE; the planner's own figure) counts at least ``VISIBLE_TO_WALK`` of the
    table's pages all-visible. A table never analyzed counts none: it sorts.
    """
    if connection.dialect.name != "postgresql":
        return True
    visible, pages = connection.execute(_VISIBILITY, {"table": rows.name}).one()
    return bool(pages) and visible >= VISIBLE_TO_WALK * pages


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
    sums = _sums(connection, conditions, level)
    if not sums:
        return None, {}
    if set(sums) - set(COMPLEXITY_ORDER):
        return _rolled_up_report(connection, conditions)
    fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
    percentiles = sa.func.percentile_cont(fractions).within_group(QueryMetricRow.response_ms)
    columns = [percentiles, *(percentiles.filter(level == key) for key in sums)]
    found = connection.execute(
        sa.select(
            *(sa.type_coerce(column, postgresql.ARRAY(sa.Float())) for column in columns)
        ).where(*conditions)
    ).one()
    overall = _make_figures(_added(list(sums.values())), tuple(found[0]))
    grouped = {
        key: _make_figures(row, tuple(found[index + 1]))
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
    fractions = sa.literal(list(PERCENTILES), postgresql.ARRAY(sa.Float()))
    percentiles = sa.func.percentile_cont(fractions).within_group(QueryMetricRow.response_ms)
    statement = (
        sa.select(
            level.label("g"),
            sa.func.grouping(level).label("whole"),
            *_aggregates(),
            sa.type_coerce(percentiles, postgresql.ARRAY(sa.Float())).label("p"),
        )
        .where(*conditions)
        .group_by(sa.func.rollup(level))
    )
    overall: MetricsFigures | None = None
    grouped: dict[Any, MetricsFigures] = {}
    for row in connection.execute(statement).mappings():
        if not row["n"]:
            continue
        figures = _make_figures(row, tuple(row["p"]))
        if row["whole"]:
            overall = figures
        else:
            grouped[row["g"]] = figures
    return overall, grouped


def _added(rows: Sequence[Mapping[Any, Any]]) -> dict[str, Any]:
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


OWN_INDEX = "own"
SHARED_INDEX = "shared"
_WALKED = {
    ("query_metrics", "complexity"): OWN_INDEX,  # ix_query_metrics_complexity_latency
    ("query_metrics", "worker"): OWN_INDEX,  # ix_query_metrics_worker_latency
    ("query_metric_lessons", "lesson_id"): OWN_INDEX,  # ix_query_metric_lessons_latency
    ("query_metrics", "intent"): SHARED_INDEX,  # filtered along ix_query_metrics_latency
}


def _walked_index(group: Group | None) -> str | None:
    """How a walk reads ``group``'s percentiles: along an index it leads (``OWN_INDEX``),
    filtering a shared one (``SHARED_INDEX``: steps over every group's rows), or not
    (``None``: not a column an index holds in response-time order)."""
    column = getattr(group, "__clause_element__", lambda: group)()
    table = getattr(column, "table", None)
    if not isinstance(column, sa.Column) or not isinstance(table, sa.Table):
        return None
    return _WALKED.get((table.name, column.name))


def _sums(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: Group | None,
    rows: sa.Table = QUERY_METRICS,
) -> dict[Any, sa.RowMapping]:
    """count, sums and first/last per value of ``group``: one GROUP BY, no sort of values."""
    key = (sa.null() if group is None else group).label("g")
    statement = sa.select(key, *_aggregates(rows)).select_from(rows).where(*conditions)
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


def _make_figures(row: Mapping[Any, Any], percentiles: Sequence[float | None]) -> MetricsFigures:
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
