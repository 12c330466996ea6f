"""What a metrics report reads, planned the same on every database: which rows, walked or
sorted, grouped how. Where the databases differ, the plan asks the connection's
``MetricsStrategy`` (``strategy_of``): PostgreSQL computes percentiles with
``percentile_cont``; SQLite ranks the rows with window functions, fetches only the two rows
around each percentile's position and interpolates with PostgreSQL's own arithmetic
(``metrics.report.interpolate``), so both give the same figures for the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from contextstore.backends.sql.dialects import Dialect, dialect_of
from contextstore.backends.sql.metrics.figures import (
    QUERY_METRICS,
    RUN_LESSONS,
    Group,
    filter_conditions,
    group_sums,
    make_figures,
    sum_groups,
    walkable,
    walked_percentiles,
)
from contextstore.backends.sql.metrics.postgresql import PostgreSQLMetrics
from contextstore.backends.sql.metrics.report import (
    GROUPINGS,
    MetricsFigures,
    MetricsFilter,
)
from contextstore.backends.sql.metrics.sqlite import SQLiteMetrics
from contextstore.backends.sql.metrics.strategy import MetricsStrategy
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.errors import ValidationError

__all__ = [
    "QUERY_METRICS",
    "RUN_LESSONS",
    "STRATEGIES",
    "WALK_GROUPS",
    "Group",
    "Grouping",
    "bucket_index",
    "filter_conditions",
    "grouped_figures",
    "grouping",
    "grouping_figures",
    "report_figures",
    "strategy_of",
    "walk_conditions",
    "walkable",
    "walked_percentiles",
    "walks_pay",
]

STRATEGIES: Final[dict[str, MetricsStrategy]] = {
    "sqlite": SQLiteMetrics(),
    "postgresql": PostgreSQLMetrics(),
}


def strategy_of(bind: Dialect | sa.Connection | sa.Engine | str) -> MetricsStrategy:
    """The metrics strategy of ``bind``'s dialect (``dialect_of``)."""
    return STRATEGIES[dialect_of(bind).name]


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
    dialect = dialect_of(connection)
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


WALK_GROUPS = 8
"""Most groups whose percentiles are read by walking an index the group does not lead (each
walk steps over every group's rows); more are sorted. A group leading its own index walks
however many."""


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
        sums = group_sums(connection, conditions, group, rows)
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
            return {key: make_figures(row, ranks[key]) for key, row in sums.items()}
    return strategy_of(connection).unwalked_figures(connection, conditions, group, rows)


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
    if not walk:
        sorted_report = strategy_of(connection).levels_report(connection, conditions)
        if sorted_report is not None:
            return sorted_report
    if walk:
        sums = group_sums(connection, conditions, level)
        if len(sums) <= WALK_GROUPS:
            counts = {key: int(row["n"]) for key, row in sums.items()}
            walked = conditions if walk_on is None else walk_on
            ranks = walked_percentiles(connection, walked, level, counts)
            grouped = {key: make_figures(row, ranks[key]) for key, row in sums.items()}
            if not sums:
                return None, grouped
            total = sum_groups(list(sums.values()))
            overall = walked_percentiles(connection, walked, None, {None: int(total["n"])})
            return make_figures(total, overall[None]), grouped
    overall_figures = grouped_figures(connection, conditions, None).get(None)
    return overall_figures, grouped_figures(connection, conditions, level)


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
    return strategy_of(connection).walk_conditions(connection, filters, conditions, rows)


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
    return strategy_of(connection).walks_pay(connection, rows)


def bucket_index(dialect: Dialect | str, bucket_seconds: int) -> sa.ColumnElement[int]:
    """``floor(epoch_seconds(recorded_at) / bucket_seconds)`` as an integer, per dialect."""
    return strategy_of(dialect).bucket_index(bucket_seconds)


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
