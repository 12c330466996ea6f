"""``MetricsRepository``: durable per-run metrics in ``query_metrics`` (SPEC §2.4).

Writes are one committed statement each, so a row is durable when ``record`` returns and a
refused metric leaves nothing behind. Reads summarise a filtered range of rows: counts,
response-time percentiles, means, rates, lesson totals, overall, per complexity and per
time bucket.

The parts live beside it, one purpose each: ``report`` (the figures returned and the
percentile definition, no SQL), ``metric_validation`` (what a row or filter may hold) and
``metric_queries`` (the statements that compute the figures). The report types and
``percentile`` are re-exported here, where callers have always imported them from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar, cast

import sqlalchemy as sa

from contextstore.errors import BackendUnavailableError, ContextStoreError, ValidationError
from contextstore.metrics import QueryMetric
from contextstore.sql.database import read_only, tolerating_bytes
from contextstore.sql.direct import DirectStatement
from contextstore.sql.metric_queries import (
    RUN_LESSONS,
    Group,
    bucket_index,
    filter_conditions,
    grouped_figures,
    grouping,
    grouping_figures,
    lateral_series,
    ranged_series,
    report_figures,
    walk_conditions,
    walkable,
    walks_pay,
)
from contextstore.sql.metric_validation import aware, checked_text, row_values
from contextstore.sql.models import QueryMetricRow
from contextstore.sql.report import (
    COMPLEXITY_ORDER,
    EMPTY_FIGURES,
    PERCENTILES,
    ComplexityRow,
    GroupRow,
    LessonStats,
    LessonUsage,
    MetricsFigures,
    MetricsFilter,
    MetricsReport,
    SeriesPoint,
    figure_fields,
    percentile,
)
from contextstore.sql.trace_queries import lesson_usage
from contextstore.sql.unreadable import SKIP_WARNINGS, UnreadableRowError, check_text, printable

__all__ = [
    "PERCENTILES",
    "ComplexityRow",
    "GroupRow",
    "LessonStats",
    "LessonUsage",
    "MetricsFigures",
    "MetricsFilter",
    "MetricsReport",
    "MetricsRepository",
    "SeriesPoint",
    "percentile",
    "rows_parameters",
    "translate_metrics_error",
]

# SQLite can report "database is locked" at once, without consulting its busy handler (while
# another connection recovers the WAL, or a read snapshot went stale). Such an immediate
# failure is transient: retry it a few times, backing off. A failure that took at least
# IMMEDIATE_SECONDS means the busy timeout (30 s) already ran out: report it, not retry it.
LOCK_RETRIES = 5
LOCK_BACKOFF_SECONDS = 0.02
IMMEDIATE_SECONDS = 1.0

# Memory one report's sort may use on PostgreSQL, for its transaction only. The default
# (4 MB) sorts a million response times on disk, about twice as slow as in memory; a report
# over a million rows needs about 50 MB.
REPORT_WORK_MEM = "64MB"

T = TypeVar("T")
QUERY_METRICS: Final = cast(sa.Table, QueryMetricRow.__table__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class MetricsRepository:
    """Writes and summarises ``query_metrics`` rows; a ``MetricsSink``.

    Takes an ``Engine`` (``contextstore.sql.database.create_database_engine``) on a migrated
    database; each call opens its own connection and transaction, so one repository may be
    shared by threads. ``clock`` (aware UTC ``datetime``) is what ``prune`` measures age
    against. Filters shared by the read methods: ``since`` (inclusive) and ``until``
    (exclusive) must be timezone-aware; ``namespace`` matches exactly; ``worker_prefix``
    matches workers starting with it, case-sensitively on every database (``""`` matches
    all). Database errors become ``BackendUnavailableError`` (unreachable, locked) or
    ``ContextStoreError``, raised ``from`` the driver's exception.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        # One compiled INSERT per set of columns and number of rows (``rows_insert``).
        self._inserts: dict[tuple[tuple[str, ...], int], DirectStatement] = {}
        self._clock = clock
        # How a retry waits out a transient SQLite lock; the async repository passes one
        # that yields to the event loop instead of blocking it.
        self._sleep = sleep

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    # -- writes -------------------------------------------------------------------------

    def record(self, metric: QueryMetric) -> None:
        """Insert one row, durably, before returning: one statement in autocommit, so the
        database commits it with no BEGIN/COMMIT round trips of its own.

        Raises ``ValidationError`` naming the field (nothing written) for: a naive
        ``recorded_at``; an empty or over-long ``namespace``/``worker``/``query_hash``/
        ``intent`` (128/128/32/16 characters); a ``complexity`` other than ``low``,
        ``medium`` or ``high``; a negative (or > 2³¹−1, or non-integer) count or length;
        ``lessons_included > lessons_matched``; a negative, NaN or infinite
        ``response_ms``; non-boolean flags; text with NUL or lone surrogates (not UTF-8).
        """
        self.insert_rows([row_values(metric)])

    def insert_rows(self, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows`` (``row_values`` of each metric, all with the same columns) with one
        committed statement, retrying transient SQLite locks (the async repository's group
        commit writes its batches here on SQLite)."""
        insert = self.rows_insert(tuple(rows[0]), len(rows))
        values = rows_parameters(rows)
        self._retrying(lambda: insert.execute(values))

    def record_many(self, metrics: Iterable[QueryMetric]) -> int:
        """Insert every metric in one transaction; returns how many rows were written.

        All metrics are validated first: one bad metric refuses the whole batch (its field
        named in the ``ValidationError``) and nothing is written. An empty batch writes
        nothing and returns ``0``.
        """
        rows = [row_values(metric) for metric in metrics]
        if not rows:
            return 0
        self._write(lambda connection: connection.execute(sa.insert(QueryMetricRow), rows))
        return len(rows)

    def prune(self, older_than: datetime | timedelta, namespace: str | None = None) -> int:
        """Delete rows recorded strictly before a cutoff; returns how many were deleted.

        ``older_than`` is an aware ``datetime`` (the cutoff itself) or a non-negative
        ``timedelta`` (cutoff = ``clock() - older_than``). ``namespace`` limits the deletion
        to one namespace; ``None`` prunes every namespace.
        """
        cutoff = self.cutoff(older_than)
        conditions = [QueryMetricRow.recorded_at < cutoff]
        if namespace is not None:
            name = checked_text("namespace", namespace, limit=None, required=False)
            conditions.append(QueryMetricRow.namespace == name)
        statement = sa.delete(QueryMetricRow).where(*conditions)
        result = self._write(lambda connection: connection.execute(statement))
        return int(result.rowcount)

    def cutoff(self, older_than: datetime | timedelta) -> datetime:
        """The instant ``prune(older_than)`` deletes before (aware UTC)."""
        if isinstance(older_than, timedelta):
            if older_than < timedelta(0):
                raise ValidationError("older_than", f"must not be negative, got {older_than}")
            return self._clock().astimezone(UTC) - older_than
        return aware("older_than", older_than)

    # -- reads --------------------------------------------------------------------------

    def span(
        self, *, namespace: str | None = None
    ) -> tuple[datetime, datetime] | tuple[None, None]:
        """The first and last ``recorded_at`` of a namespace's rows (all rows for ``None``).

        ``(None, None)`` when there are none. Answered from the ``recorded_at`` indexes
        without reading the rows, so it costs the same at any table size.
        """
        conditions = self._conditions(MetricsFilter(namespace=namespace))
        statement = _ends(conditions)
        first, last = self._read(lambda connection: connection.execute(statement).one())
        if first is None or last is None:
            return None, None
        return first, last

    def count(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
        complexity: str | None = None,
        intent: str | None = None,
        cache_hit: bool | None = None,
        lesson: str | None = None,
    ) -> int:
        """How many rows match the filters (``0`` when none do)."""
        filters = MetricsFilter(
            since=since,
            until=until,
            namespace=namespace,
            worker_prefix=worker_prefix,
            complexity=complexity,
            intent=intent,
            cache_hit=cache_hit,
            lesson=lesson,
        )
        conditions = self._conditions(filters)
        statement = sa.select(sa.func.count()).select_from(QueryMetricRow).where(*conditions)
        return int(self._read(lambda connection: connection.execute(statement).scalar_one()))

    def report(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
        complexity: str | None = None,
        intent: str | None = None,
        cache_hit: bool | None = None,
        lesson: str | None = None,
        by: str | None = None,
        levels: bool = True,
    ) -> MetricsReport:
        """Overall and per-complexity figures of the matching rows, and ``groups`` by ``by``.

        Filters as ``MetricsFilter`` describes them. ``by`` is ``None`` (no groups) or one of
        ``GROUPINGS``: ``complexity`` (levels in ``low, medium, high`` order, then others
        alphabetically), or ``intent``, ``worker`` and ``lesson`` (most runs first, then the
        key); only groups with runs appear. Every set is read in one transaction (a
        repeatable snapshot on PostgreSQL, one read transaction on SQLite), so they agree
        even while agents keep writing. An empty range gives ``runs == 0`` and ``None``
        figures (see ``MetricsFigures``).

        ``levels=False`` leaves ``by_complexity`` empty and skips its reads (each level's
        percentiles are a walk or a sort of their own), for a caller that shows the overall
        figures beside another grouping.
        """
        filters = MetricsFilter(
            since=since,
            until=until,
            namespace=namespace,
            worker_prefix=worker_prefix,
            complexity=complexity,
            intent=intent,
            cache_hit=cache_hit,
            lesson=lesson,
        )
        conditions = self._conditions(filters)
        chosen_grouping = None if by is None else grouping(by)
        if not isinstance(levels, bool):
            raise ValidationError("levels", f"must be true or false, got {levels!r}")

        def read(
            connection: sa.Connection,
        ) -> tuple[MetricsFigures, dict[Any, MetricsFigures], dict[Any, MetricsFigures]]:
            walk = walkable(filters) and walks_pay(connection)
            walk_on = walk_conditions(connection, filters, conditions) if walk else None
            overall, grouped = report_figures(
                connection, conditions, walk=walk, walk_on=walk_on, levels=levels
            )
            chosen = (
                {}
                if chosen_grouping is None
                else grouping_figures(connection, filters, chosen_grouping)
            )
            return overall or EMPTY_FIGURES, grouped, chosen

        overall, grouped, chosen = self._read(read, snapshot=True)
        shown = list(COMPLEXITY_ORDER) + sorted(set(grouped) - set(COMPLEXITY_ORDER))
        rows = tuple(
            ComplexityRow(
                complexity=printable(level), **figure_fields(grouped.get(level, EMPTY_FIGURES))
            )
            for level in (shown if levels else ())
        )
        return MetricsReport(
            **figure_fields(overall),
            by_complexity=rows,
            # Validated (aware) by filter_conditions; kept in UTC like every other instant here.
            since=None if since is None else since.astimezone(UTC),
            until=None if until is None else until.astimezone(UTC),
            namespace=namespace,
            worker_prefix=worker_prefix,
            complexity=complexity,
            intent=intent,
            cache_hit=cache_hit,
            lesson=lesson,
            by=by,
            groups=_group_rows(by, chosen),
        )

    def groups(
        self,
        by: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
        complexity: str | None = None,
        intent: str | None = None,
        cache_hit: bool | None = None,
        lesson: str | None = None,
    ) -> tuple[GroupRow, ...]:
        """``report(by=by, ...).groups`` alone, in a snapshot of its own: for a caller that
        reads the overall figures in another transaction side by side (the console's
        overview), so the two statements run at once rather than one after the other."""
        filters = MetricsFilter(
            since=since,
            until=until,
            namespace=namespace,
            worker_prefix=worker_prefix,
            complexity=complexity,
            intent=intent,
            cache_hit=cache_hit,
            lesson=lesson,
        )
        self._conditions(filters)  # validates every filter before anything is read
        chosen = grouping(by)
        grouped = self._read(
            lambda connection: grouping_figures(connection, filters, chosen), snapshot=True
        )
        return _group_rows(by, grouped)

    def lesson_stats(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
    ) -> LessonStats:
        """How the runs in the range used each lesson, and which active lessons none used.

        ``since`` (inclusive) and ``until`` (exclusive) are aware instants; ``namespace``
        ``None`` covers every namespace (lessons are shared by the database's namespaces).
        Counted in SQL from ``query_metric_lessons`` (each run's lessons, kept from its traces
        by triggers): a run naming a lesson twice counts once; runs recorded before traces
        existed count in ``runs`` but name no lesson. One snapshot, as ``report``.
        """
        filters = MetricsFilter(since=since, until=until, namespace=namespace)
        conditions = self._conditions(filters)
        dialect = self._engine.dialect.name
        named = filter_conditions(filters, dialect, rows=RUN_LESSONS)
        count = sa.select(sa.func.count()).select_from(QueryMetricRow).where(*conditions)

        def read(connection: sa.Connection) -> LessonStats:
            runs = int(connection.execute(count).scalar_one())
            # An id holding bytes that are not UTF-8 (typed into SQLite by hand) is skipped.
            rows = [
                row
                for row in connection.execute(lesson_usage(named)).all()
                if _readable_id(row.entity_id)
            ]
            usage = tuple(
                LessonUsage(
                    entity_id=row.entity_id,
                    status=row.status,
                    runs_matched=int(row.runs_matched),
                    runs_included=int(row.runs_included),
                    last_included_at=row.last_included_at,
                )
                for row in rows
                if row.used
            )
            unused = tuple(
                sorted(
                    row.entity_id
                    for row in rows
                    if row.status == "active" and not int(row.runs_included)
                )
            )
            return LessonStats(
                runs=runs,
                lessons=usage,
                unused=unused,
                since=None if since is None else since.astimezone(UTC),
                until=None if until is None else until.astimezone(UTC),
                namespace=namespace,
            )

        return self._read(read, snapshot=True)

    def series(
        self,
        *,
        bucket_seconds: int = 3600,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
        complexity: str | None = None,
        intent: str | None = None,
        cache_hit: bool | None = None,
        lesson: str | None = None,
    ) -> tuple[SeriesPoint, ...]:
        """Figures per time bucket, oldest first (what ``contextstore.plot`` draws).

        Buckets are ``bucket_seconds`` long (an integer ≥ 1) and aligned to the Unix epoch in
        UTC (an hour bucket starts on the hour). Buckets without runs are omitted, so an
        empty range gives ``()``.
        """
        if (
            isinstance(bucket_seconds, bool)
            or not isinstance(bucket_seconds, int)
            or bucket_seconds < 1
        ):
            raise ValidationError(
                "bucket_seconds", f"must be an integer ≥ 1, got {bucket_seconds!r}"
            )
        filters = MetricsFilter(
            since=since,
            until=until,
            namespace=namespace,
            worker_prefix=worker_prefix,
            complexity=complexity,
            intent=intent,
            cache_hit=cache_hit,
            lesson=lesson,
        )
        conditions = self._conditions(filters)
        dialect = self._engine.dialect.name
        ends = _ends(conditions)

        def read(connection: sa.Connection) -> dict[Any, MetricsFigures]:
            group: Group = bucket_index(dialect, bucket_seconds)
            first, last = connection.execute(ends).one()
            if first is None or last is None:
                return {}
            if dialect == "postgresql":
                found = lateral_series(connection, conditions, first, last, bucket_seconds)
                if found is not None:
                    return found
            else:
                found = ranged_series(connection, filters, first, last, bucket_seconds)
                if found is not None:
                    return found
            return grouped_figures(connection, conditions, group)

        grouped = self._read(read, snapshot=True)
        return tuple(
            SeriesPoint(
                bucket_start=datetime.fromtimestamp(int(index) * bucket_seconds, UTC),
                bucket_seconds=bucket_seconds,
                **figure_fields(figures),
            )
            for index, figures in sorted(grouped.items())
        )

    # -- plumbing -----------------------------------------------------------------------

    def _conditions(self, filters: MetricsFilter) -> list[sa.ColumnElement[bool]]:
        return filter_conditions(filters, self._engine.dialect.name)

    def rows_insert(self, keys: tuple[str, ...], count: int) -> DirectStatement:
        """The INSERT of ``count`` rows of these columns, sent on the driver connection (a
        run's write, see ``contextstore.sql.direct``); compiled once per columns and count.
        Its parameters are ``rows_parameters`` of the rows."""
        statement = self._inserts.get((keys, count))
        if statement is None:
            columns = QUERY_METRICS.c
            rows = [
                {key: sa.bindparam(f"{key}_{index}", type_=columns[key].type) for key in keys}
                for index in range(count)
            ]
            statement = DirectStatement(self._engine, sa.insert(QUERY_METRICS).values(rows))
            self._inserts[keys, count] = statement
        return statement

    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in one committed transaction, retrying transient SQLite locks."""

        def attempt() -> T:
            with self._engine.begin() as connection:
                return work(connection)

        return self._retrying(attempt)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, again after a transient SQLite lock; errors translated."""
        for retry in range(LOCK_RETRIES + 1):
            started = time.monotonic()
            try:
                return attempt()
            except sa.exc.OperationalError as exc:
                immediate = time.monotonic() - started < IMMEDIATE_SECONDS
                if retry < LOCK_RETRIES and immediate and _is_lock(self._engine, exc):
                    self._sleep(LOCK_BACKOFF_SECONDS * 2**retry)
                    continue
                raise translate_metrics_error(exc) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise translate_metrics_error(exc) from exc
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read(self, work: Callable[[sa.Connection], T], *, snapshot: bool = False) -> T:
        return tolerating_bytes(self._engine, lambda: self._read_once(work, snapshot=snapshot))

    def _read_once(self, work: Callable[[sa.Connection], T], *, snapshot: bool) -> T:
        try:
            with read_only(self._engine).connect() as connection:
                if snapshot and connection.dialect.name == "postgresql":
                    # One snapshot for several statements; the default READ COMMITTED would
                    # let rows committed between them make the figures disagree.
                    connection = connection.execution_options(isolation_level="REPEATABLE READ")
                with connection.begin():
                    if connection.dialect.name == "postgresql":
                        connection.exec_driver_sql(f"SET LOCAL work_mem = '{REPORT_WORK_MEM}'")
                    return work(connection)
        except sa.exc.SQLAlchemyError as exc:
            raise translate_metrics_error(exc) from exc
        except ContextStoreError:
            raise  # a refusal of ours (ValidationError is a ValueError too)
        except ValueError as exc:
            # A value typed by hand in SQL that the column's type cannot read back (SQLite
            # keeps whatever text it is given: recorded_at = 'yesterday').
            raise ContextStoreError(
                f"metrics database holds a row the library cannot read ({exc}); "
                "fix or delete it in SQL"
            ) from exc


def _ends(conditions: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """The first and last ``recorded_at`` under ``conditions``, each its own subquery: SQLite
    reads a lone min() or max() from one end of an index, but scans for both together."""
    row = QueryMetricRow
    first = sa.select(sa.func.min(row.recorded_at)).where(*conditions).scalar_subquery()
    last = sa.select(sa.func.max(row.recorded_at)).where(*conditions).scalar_subquery()
    return sa.select(
        sa.type_coerce(first, row.recorded_at.type), sa.type_coerce(last, row.recorded_at.type)
    )


def _group_rows(by: str | None, grouped: dict[Any, MetricsFigures]) -> tuple[GroupRow, ...]:
    if by == "complexity":
        known = [level for level in COMPLEXITY_ORDER if level in grouped]
        keys = known + sorted(set(grouped) - set(COMPLEXITY_ORDER))
    else:
        keys = sorted(grouped, key=lambda key: (-grouped[key].runs, key))
    # A value holding bytes that are not UTF-8 (typed into SQLite by hand) is shown escaped.
    return tuple(GroupRow(key=printable(str(key)), **figure_fields(grouped[key])) for key in keys)


def rows_parameters(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The parameters of ``rows_insert(keys, len(rows))`` for ``rows``, by name."""
    return {f"{key}_{index}": value for index, row in enumerate(rows) for key, value in row.items()}


def _is_lock(engine: sa.Engine, exc: sa.exc.OperationalError) -> bool:
    if engine.dialect.name != "sqlite":
        return False
    message = str(exc.orig).lower()
    return "database is locked" in message or "database is busy" in message


def translate_metrics_error(exc: sa.exc.SQLAlchemyError) -> ContextStoreError:
    """The contextstore error for a driver error of a metrics statement."""
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return BackendUnavailableError(f"metrics database unavailable: {exc.orig}")
    detail = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return ContextStoreError(f"metrics database error: {detail}")


def _readable_id(entity_id: str) -> bool:
    try:
        check_text("entity_id", entity_id)
    except UnreadableRowError as error:
        SKIP_WARNINGS.skipped(printable(entity_id), error)
        return False
    return True
