"""``MetricsRepository``: durable per-run metrics in ``query_metrics`` (docs/design/storage.md).

Writes are one committed statement each, so a row is durable when ``record`` returns and a
refused metric leaves nothing behind. Reads summarise a filtered range of rows: counts,
response-time percentiles, means, rates, lesson totals, overall, per complexity and per
time bucket.

The parts live beside it, one purpose each: ``report`` (the figures returned and the
percentile definition, no SQL), ``validation`` (what a row or filter may hold),
``tenancy`` (which namespaces a call covers), ``queries`` (what a report reads, planned
once) over ``figures`` (the statements' pieces) and a ``MetricsStrategy`` per database
(``sqlite``, ``postgresql``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, Unpack, cast

import sqlalchemy as sa

from contextstore.backends.sql.database import tolerating_bytes
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.errors import translate_metrics_error
from contextstore.backends.sql.metrics.figures import time_ends
from contextstore.backends.sql.metrics.queries import (
    RUN_LESSONS,
    filter_conditions,
    grouped_figures,
    grouping,
    grouping_figures,
    report_figures,
    strategy_of,
    walk_conditions,
    walkable,
    walks_pay,
)
from contextstore.backends.sql.metrics.report import (
    COMPLEXITY_ORDER,
    EMPTY_FIGURES,
    ComplexityRow,
    GroupRow,
    LessonStats,
    LessonUsage,
    MetricsFigures,
    MetricsFilter,
    MetricsFilterFields,
    MetricsReport,
    SeriesPoint,
    figure_fields,
)
from contextstore.backends.sql.metrics.tenancy import bound_namespace, bound_row, scoped_namespace
from contextstore.backends.sql.metrics.validation import bound, checked_text, resolve
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.backends.sql.trace_queries import lesson_usage
from contextstore.backends.sql.transactions import read_connection, retry_locks, utc_now
from contextstore.backends.sql.unreadable import (
    SKIP_WARNINGS,
    UnreadableRowError,
    check_text,
    printable,
)
from contextstore.core.filters import Instant, instant
from contextstore.core.metrics import QueryMetric
from contextstore.errors import ContextStoreError, ValidationError

__all__ = ["MetricsRepository", "rows_parameters"]

T = TypeVar("T")
QUERY_METRICS: Final = cast(sa.Table, QueryMetricRow.__table__)


class MetricsRepository:
    """Writes and summarises ``query_metrics`` rows; a ``MetricsSink``.

    Takes an ``Engine`` (``backends.sql.database.create_database_engine``) on a migrated
    database; each call opens its own connection and transaction, so one repository may be
    shared by threads. ``clock`` (aware UTC ``datetime``) is what ``prune`` measures age
    against. Filters shared by the read methods: ``since`` (inclusive) and ``until``
    (exclusive) take any form ``contextstore.core.filters`` reads (``"24h"``, ISO 8601, a
    ``timedelta``, an aware ``datetime``); ``complexity`` and ``intent`` ignore case (another
    value is refused, naming those allowed); ``namespace`` matches exactly; ``worker_prefix``
    matches workers starting with it, case-sensitively on every database (``""``: all).
    Database errors become ``BackendUnavailableError`` or ``ContextStoreError``.

    ``namespace`` binds the repository to one tenant (a store's ``metrics`` is bound to the
    store's namespace): every read and ``prune`` then covers that namespace alone, and a
    metric of another namespace is refused (``ValidationError`` naming ``namespace``),
    unless the call passes ``all_namespaces=True`` — then ``namespace=`` picks any one
    namespace, and ``None`` means every namespace. An unbound repository (``None``, the
    default) covers every namespace unless ``namespace=`` narrows it.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        namespace: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        self._namespace = None if namespace is None else bound_namespace(namespace)
        # One compiled INSERT per set of columns and number of rows (``rows_insert``).
        self._inserts: dict[tuple[tuple[str, ...], int], DirectStatement] = {}
        self._clock = clock
        # How a retry waits out a transient SQLite lock; the async repository passes one
        # that yields to the event loop instead of blocking it.
        self._sleep = sleep

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    @property
    def namespace(self) -> str | None:
        """The namespace this repository is bound to; ``None`` when it spans the database."""
        return self._namespace

    def scoped(self, namespace: str | None, all_namespaces: bool = False) -> str | None:
        """The namespace a call covers (``None``: every namespace); see ``scoped_namespace``."""
        return scoped_namespace(self._namespace, namespace, all_namespaces)

    def row_values(self, metric: QueryMetric) -> dict[str, Any]:
        """The INSERT values of ``metric``, validated, in the bound namespace only."""
        return bound_row(self._namespace, metric)

    # -- writes -------------------------------------------------------------------------

    def record(self, metric: QueryMetric) -> None:
        """Insert one row, durably, before returning: one statement in autocommit, so the
        database commits it with no BEGIN/COMMIT round trips of its own.

        Raises ``ValidationError`` naming the field (nothing written) for: a naive
        ``recorded_at``; an empty or over-long ``namespace``/``worker``/``query_hash``/
        ``intent`` (128/128/32/16 characters); a ``complexity`` other than ``low``,
        ``medium`` or ``high``; a negative (or > 2³¹−1, or non-integer) count or length;
        ``lessons_included > lessons_matched``; a negative, NaN or infinite
        ``response_ms``; non-boolean flags; text with NUL or lone surrogates (not UTF-8);
        another ``namespace`` than a bound repository's.
        """
        self.insert_rows([self.row_values(metric)])

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
        rows = [self.row_values(metric) for metric in metrics]
        if not rows:
            return 0
        self._write(lambda connection: connection.execute(sa.insert(QueryMetricRow), rows))
        return len(rows)

    def prune(
        self,
        older_than: Instant,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
    ) -> int:
        """Delete rows recorded strictly before a cutoff; returns how many were deleted.

        ``older_than`` is the cutoff as an aware ``datetime`` or ISO 8601 text, or a
        non-negative ``timedelta`` or duration such as ``"30d"`` (cutoff = ``clock()`` minus
        it; see ``contextstore.core.filters``). A bound repository prunes its
        namespace only; ``namespace`` and ``all_namespaces`` as the class describes (an
        unbound repository with ``namespace=None`` prunes every namespace).
        """
        namespace = self.scoped(namespace, all_namespaces)
        cutoff = self.cutoff(older_than)
        conditions = [QueryMetricRow.recorded_at < cutoff]
        if namespace is not None:
            name = checked_text("namespace", namespace, limit=None, required=False)
            conditions.append(QueryMetricRow.namespace == name)
        statement = sa.delete(QueryMetricRow).where(*conditions)
        result = self._write(lambda connection: connection.execute(statement))
        return int(result.rowcount)

    def cutoff(self, older_than: Instant) -> datetime:
        """The instant ``prune(older_than)`` deletes before (aware UTC)."""
        return instant("older_than", older_than, self._clock())

    # -- reads --------------------------------------------------------------------------

    def span(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> tuple[datetime, datetime] | tuple[None, None]:
        """The first and last ``recorded_at`` of the covered rows (namespaces as the class
        describes).

        ``(None, None)`` when there are none. Answered from the ``recorded_at`` indexes
        without reading the rows, so it costs the same at any table size.
        """
        namespace = self.scoped(namespace, all_namespaces)
        conditions = self._conditions(MetricsFilter(namespace=namespace))
        statement = time_ends(conditions)
        first, last = self._read(lambda connection: connection.execute(statement).one())
        if first is None or last is None:
            return None, None
        return first, last

    def count(
        self,
        filters: MetricsFilter | None = None,
        *,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> int:
        """How many rows match ``filters`` (``0`` when none do). Each filter may be given as
        a keyword of its own instead, over ``filters`` (as for ``report``, ``groups`` and
        ``series``)."""
        chosen = self._filters(filters, fields, all_namespaces)
        conditions = self._conditions(chosen)
        statement = sa.select(sa.func.count()).select_from(QueryMetricRow).where(*conditions)
        return int(self._read(lambda connection: connection.execute(statement).scalar_one()))

    def report(
        self,
        filters: MetricsFilter | None = None,
        *,
        by: str | None = None,
        levels: bool = True,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
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

        ``namespace`` and ``all_namespaces`` as the class describes; the report's
        ``namespace`` is the one covered (``None``: every namespace).
        """
        filters = self._filters(filters, fields, all_namespaces)
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
            since=bound(filters.since),
            until=bound(filters.until),
            namespace=filters.namespace,
            worker_prefix=filters.worker_prefix,
            complexity=filters.complexity,
            intent=filters.intent,
            cache_hit=filters.cache_hit,
            lesson=filters.lesson,
            by=by,
            groups=_group_rows(by, chosen),
        )

    def groups(
        self,
        by: str,
        filters: MetricsFilter | None = None,
        *,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> tuple[GroupRow, ...]:
        """``report(by=by, ...).groups`` alone, in a snapshot of its own: for a caller that
        reads the overall figures in another transaction side by side (the console's
        overview), so the two statements run at once rather than one after the other."""
        filters = self._filters(filters, fields, all_namespaces)
        self._conditions(filters)  # validates every filter before anything is read
        chosen = grouping(by)
        grouped = self._read(
            lambda connection: grouping_figures(connection, filters, chosen), snapshot=True
        )
        return _group_rows(by, grouped)

    def lesson_stats(
        self,
        *,
        since: Instant | None = None,
        until: Instant | None = None,
        namespace: str | None = None,
        all_namespaces: bool = False,
    ) -> LessonStats:
        """How the runs in the range used each lesson, and which active lessons none used.

        ``since`` (inclusive) and ``until`` (exclusive) are aware instants; the runs of the
        namespaces the class describes (the lessons themselves are shared by the database's
        namespaces, so every active lesson is listed).
        Counted in SQL from ``query_metric_lessons`` (each run's lessons, kept from its traces
        by triggers): a run naming a lesson twice counts once; runs recorded before traces
        existed count in ``runs`` but name no lesson. One snapshot, as ``report``.
        """
        filters = self._filters(
            None, {"since": since, "until": until, "namespace": namespace}, all_namespaces
        )
        conditions = self._conditions(filters)
        named = filter_conditions(filters, dialect_of(self._engine), rows=RUN_LESSONS)
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
                since=bound(filters.since),
                until=bound(filters.until),
                namespace=filters.namespace,
            )

        return self._read(read, snapshot=True)

    def series(
        self,
        filters: MetricsFilter | None = None,
        *,
        bucket_seconds: int = 3600,
        all_namespaces: bool = False,
        **fields: Unpack[MetricsFilterFields],
    ) -> tuple[SeriesPoint, ...]:
        """Figures per time bucket, oldest first (what ``contextstore.interfaces.cli.plot`` draws).

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
        filters = self._filters(filters, fields, all_namespaces)
        conditions = self._conditions(filters)
        strategy = strategy_of(self._engine)
        ends = time_ends(conditions)

        def read(connection: sa.Connection) -> dict[Any, MetricsFigures]:
            first, last = connection.execute(ends).one()
            if first is None or last is None:
                return {}
            found = strategy.series(connection, filters, conditions, first, last, bucket_seconds)
            if found is not None:
                return found
            return grouped_figures(connection, conditions, strategy.bucket_index(bucket_seconds))

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

    def _filters(
        self,
        filters: MetricsFilter | None,
        fields: MetricsFilterFields | dict[str, Any],
        all_namespaces: bool,
    ) -> MetricsFilter:
        """``filters`` with the keyword ``fields`` over it, in the namespaces this call
        covers (``scoped``), its instants and choices resolved (``resolve``)."""
        if filters is None:
            filters = MetricsFilter()
        elif not isinstance(filters, MetricsFilter):
            raise ValidationError(
                "filters", f"must be a MetricsFilter, got {type(filters).__name__}"
            )
        if fields:
            filters = replace(filters, **fields)
        namespace = self.scoped(filters.namespace, all_namespaces)
        return resolve(replace(filters, namespace=namespace), self._clock())

    def _conditions(self, filters: MetricsFilter) -> list[sa.ColumnElement[bool]]:
        return filter_conditions(filters, dialect_of(self._engine))

    def rows_insert(self, keys: tuple[str, ...], count: int) -> DirectStatement:
        """The INSERT of ``count`` rows of these columns, sent on the driver connection (a
        run's write, see ``contextstore.backends.sql.direct``); compiled once per columns and count.
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
        """``attempt()``, again after a transient lock (``retry_locks``); errors translated."""
        return retry_locks(self._engine, lambda: _translated(attempt), self._sleep)

    def _read(self, work: Callable[[sa.Connection], T], *, snapshot: bool = False) -> T:
        """``work`` in a read-only transaction (one snapshot with ``snapshot``)."""
        return tolerating_bytes(self._engine, lambda: self._read_once(work, snapshot))

    def _read_once(self, work: Callable[[sa.Connection], T], snapshot: bool) -> T:
        try:
            with read_connection(self._engine, snapshot=snapshot, report=True) as connection:
                return work(connection)
        except sa.exc.SQLAlchemyError as exc:
            raise translate_metrics_error(exc) from exc
        except ContextStoreError:
            raise  # a refusal of ours (ValidationError is a ValueError too)
        except ValueError as exc:
            # A value typed by hand in SQL that the column's type cannot read back (SQLite
            # keeps whatever text it is given: recorded_at = 'yesterday').
            raise ContextStoreError(
                "metrics database holds a row the library cannot read "
                f"({exc}); fix or delete it in SQL"
            ) from exc


def _translated(attempt: Callable[[], T]) -> T:
    try:
        return attempt()
    except sa.exc.SQLAlchemyError as exc:
        raise translate_metrics_error(exc) from exc


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


def _readable_id(entity_id: str) -> bool:
    try:
        check_text("entity_id", entity_id)
    except UnreadableRowError as error:
        SKIP_WARNINGS.skipped(printable(entity_id), error)
        return False
    return True
