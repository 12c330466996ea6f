"""``MetricsRepository``: durable per-run metrics in ``query_metrics`` (SPEC §2.4).

Writes are one committed statement each, so a row is durable when ``record`` returns and a
refused metric leaves nothing behind. Reads summarise a filtered range of rows: counts,
response-time percentiles, means, rates, lesson totals, overall, per complexity and per
time bucket.

Percentiles use one definition everywhere — linear interpolation between closest ranks,
identical to PostgreSQL's ``percentile_cont`` and to numpy's default ``method="linear"``:
for ``n`` values sorted ascending ``v[0] ≤ … ≤ v[n-1]`` and a fraction ``p``, let
``pos = p * (n - 1)``, ``lo = floor(pos)``; the percentile is ``v[lo]`` when ``pos == lo``,
else ``v[lo] + (v[lo+1] - v[lo]) * (pos - lo)``. PostgreSQL computes it in SQL with
``percentile_cont``; other databases (SQLite) rank the rows with window functions in SQL,
fetch only the two rows around each ``pos`` and interpolate here with PostgreSQL's own
arithmetic (IEEE doubles), so both give the same figures for the same rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import InstrumentedAttribute

from contextstore.analysis import QueryComplexity
from contextstore.errors import BackendUnavailableError, ContextStoreError, ValidationError
from contextstore.metrics import QueryMetric
from contextstore.sql.database import read_only
from contextstore.sql.models import QueryMetricRow

__all__ = [
    "PERCENTILES",
    "ComplexityRow",
    "MetricsFigures",
    "MetricsReport",
    "MetricsRepository",
    "SeriesPoint",
    "percentile",
]

PERCENTILES = (0.50, 0.95, 0.99)
"""The fractions reported as ``p50_ms``, ``p95_ms`` and ``p99_ms``."""

COMPLEXITY_ORDER = tuple(level.value for level in QueryComplexity)  # low, medium, high

# Column limits from the schema; checked here so a bad value is refused with its field's name
# instead of surfacing as a driver error (or silently truncated by a lenient database).
TEXT_LIMITS = {"namespace": 128, "worker": 128, "query_hash": 32, "intent": 16}
INT_FIELDS = (
    "budget",
    "context_length",
    "chunk_count",
    "lessons_matched",
    "lessons_included",
)
INT32_MAX = 2**31 - 1

# SQLite can report "database is locked" at once, without consulting its busy handler (while
# another connection recovers the WAL, or a read snapshot went stale). Such an immediate
# failure is transient: retry it a few times, backing off. A failure that took at least
# IMMEDIATE_SECONDS means the busy timeout (30 s) already ran out: report it, not retry it.
LOCK_RETRIES = 5
LOCK_BACKOFF_SECONDS = 0.02
IMMEDIATE_SECONDS = 1.0

T = TypeVar("T")
_Group = sa.ColumnElement[Any] | InstrumentedAttribute[Any]


@dataclass(frozen=True, kw_only=True)
class MetricsFigures:
    """Summary figures of a set of runs.

    With no runs: ``runs`` and the ``*_total`` sums are ``0``; percentiles, means, rates and
    the first/last timestamps are ``None`` (undefined, rather than a misleading zero).
    Rates are fractions in ``[0, 1]``; times are milliseconds; lengths are characters.
    """

    runs: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_context_length: float | None
    guard_failure_rate: float | None
    cache_hit_rate: float | None
    lessons_matched_total: int
    lessons_matched_mean: float | None
    lessons_included_total: int
    lessons_included_mean: float | None
    first_recorded_at: datetime | None
    last_recorded_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings, nested rows as dicts."""
        result: dict[str, Any] = _jsonable(asdict(self))
        return result


@dataclass(frozen=True, kw_only=True)
class ComplexityRow(MetricsFigures):
    """The figures of the runs of one complexity (``low``, ``medium`` or ``high``)."""

    complexity: str


@dataclass(frozen=True, kw_only=True)
class SeriesPoint(MetricsFigures):
    """The figures of the runs recorded in ``[bucket_start, bucket_start + bucket_seconds)``."""

    bucket_start: datetime
    bucket_seconds: int


@dataclass(frozen=True, kw_only=True)
class MetricsReport(MetricsFigures):
    """Overall figures of the selected runs plus ``by_complexity``.

    ``by_complexity`` always holds ``low``, ``medium`` and ``high`` in that order (a level
    without runs has zero/``None`` figures), followed by any other level found in the table
    (rows written by hand in SQL), alphabetically. The filters that selected the runs are
    kept (in UTC): ``since`` is inclusive, ``until`` exclusive, ``None`` means unbounded.
    """

    by_complexity: tuple[ComplexityRow, ...]
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None
    worker_prefix: str | None = None


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ascending ``sorted_values``, as ``percentile_cont``.

    ``None`` for an empty sequence; ``ValueError`` unless ``0 <= fraction <= 1``.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction!r}")
    if not sorted_values:
        return None
    ranks = {index: value for index, value in enumerate(sorted_values)}
    return _interpolate(ranks, len(sorted_values), fraction)


def _interpolate(ranks: Mapping[int, float], count: int, fraction: float) -> float:
    """PostgreSQL's ``percentile_cont`` arithmetic over 0-based ranks (``ranks`` may be sparse).

    Written exactly as PostgreSQL does it (``lo + (hi - lo) * proportion`` in doubles), so
    the result is bit-identical to the server's on the same values.
    """
    position = fraction * (count - 1)
    first = math.floor(position)
    low = float(ranks[first])
    if position == first:
        return low
    high = float(ranks[first + 1])
    return low + (high - low) * (position - first)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


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

    def __init__(self, engine: sa.Engine, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._engine = engine
        self._clock = clock

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    # -- writes -------------------------------------------------------------------------

    def record(self, metric: QueryMetric) -> None:
        """Insert one row and commit before returning.

        Raises ``ValidationError`` naming the field (nothing written) for: a naive
        ``recorded_at``; an empty or over-long ``namespace``/``worker``/``query_hash``/
        ``intent`` (128/128/32/16 characters); a ``complexity`` other than ``low``,
        ``medium`` or ``high``; a negative (or > 2³¹−1, or non-integer) count or length;
        ``lessons_included > lessons_matched``; a negative, NaN or infinite
        ``response_ms``; non-boolean flags; text with NUL or lone surrogates (not UTF-8).
        """
        values = _row_values(metric)
        self._write(lambda connection: connection.execute(sa.insert(QueryMetricRow), values))

    def record_many(self, metrics: Iterable[QueryMetric]) -> int:
        """Insert every metric in one transaction; returns how many rows were written.

        All metrics are validated first: one bad metric refuses the whole batch (its field
        named in the ``ValidationError``) and nothing is written. An empty batch writes
        nothing and returns ``0``.
        """
        rows = [_row_values(metric) for metric in metrics]
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
            name = _text("namespace", namespace, limit=None, required=False)
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
        return _aware("older_than", older_than)

    # -- reads --------------------------------------------------------------------------

    def count(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
    ) -> int:
        """How many rows match the filters (``0`` when none do)."""
        conditions = _conditions(since, until, namespace, worker_prefix)
        statement = sa.select(sa.func.count()).select_from(QueryMetricRow).where(*conditions)
        return int(self._read(lambda connection: connection.execute(statement).scalar_one()))

    def report(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
    ) -> MetricsReport:
        """Overall and per-complexity figures of the matching rows.

        Both sets are read in one transaction (a repeatable snapshot on PostgreSQL, one
        read transaction on SQLite), so they agree even while agents keep writing. An empty
        range gives ``runs == 0`` and ``None`` figures (see ``MetricsFigures``).
        """
        conditions = _conditions(since, until, namespace, worker_prefix)

        def read(connection: sa.Connection) -> tuple[MetricsFigures, dict[Any, MetricsFigures]]:
            overall = _figures(connection, conditions, None).get(None, _EMPTY)
            grouped = _figures(connection, conditions, QueryMetricRow.complexity)
            return overall, grouped

        overall, grouped = self._read(read, snapshot=True)
        levels = list(COMPLEXITY_ORDER) + sorted(set(grouped) - set(COMPLEXITY_ORDER))
        rows = tuple(
            ComplexityRow(complexity=level, **_fields(grouped.get(level, _EMPTY)))
            for level in levels
        )
        return MetricsReport(
            **_fields(overall),
            by_complexity=rows,
            # Validated (aware) by _conditions; kept in UTC like every other instant here.
            since=None if since is None else since.astimezone(UTC),
            until=None if until is None else until.astimezone(UTC),
            namespace=namespace,
            worker_prefix=worker_prefix,
        )

    def series(
        self,
        *,
        bucket_seconds: int = 3600,
        since: datetime | None = None,
        until: datetime | None = None,
        namespace: str | None = None,
        worker_prefix: str | None = None,
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
        conditions = _conditions(since, until, namespace, worker_prefix)
        bucket = _bucket_index(self._engine.dialect.name, bucket_seconds)
        grouped = self._read(lambda connection: _figures(connection, conditions, bucket))
        return tuple(
            SeriesPoint(
                bucket_start=datetime.fromtimestamp(int(index) * bucket_seconds, UTC),
                bucket_seconds=bucket_seconds,
                **_fields(figures),
            )
            for index, figures in sorted(grouped.items())
        )

    # -- plumbing -----------------------------------------------------------------------

    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in one committed transaction, retrying transient SQLite locks."""
        for attempt in range(LOCK_RETRIES + 1):
            started = time.monotonic()
            try:
                with self._engine.begin() as connection:
                    return work(connection)
            except sa.exc.OperationalError as exc:
                immediate = time.monotonic() - started < IMMEDIATE_SECONDS
                if attempt < LOCK_RETRIES and immediate and _is_lock(self._engine, exc):
                    time.sleep(LOCK_BACKOFF_SECONDS * 2**attempt)
                    continue
                raise _translate(exc) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise _translate(exc) from exc
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read(self, work: Callable[[sa.Connection], T], *, snapshot: bool = False) -> T:
        try:
            with read_only(self._engine).connect() as connection:
                if snapshot and connection.dialect.name == "postgresql":
                    # One snapshot for several statements; the default READ COMMITTED would
                    # let rows committed between them make the figures disagree.
                    connection = connection.execution_options(isolation_level="REPEATABLE READ")
                with connection.begin():
                    return work(connection)
        except sa.exc.SQLAlchemyError as exc:
            raise _translate(exc) from exc


_EMPTY = MetricsFigures(
    runs=0,
    p50_ms=None,
    p95_ms=None,
    p99_ms=None,
    mean_context_length=None,
    guard_failure_rate=None,
    cache_hit_rate=None,
    lessons_matched_total=0,
    lessons_matched_mean=None,
    lessons_included_total=0,
    lessons_included_mean=None,
    first_recorded_at=None,
    last_recorded_at=None,
)


def _fields(figures: MetricsFigures) -> dict[str, Any]:
    """The ``MetricsFigures`` fields of ``figures`` as keyword arguments (shallow)."""
    return {name: getattr(figures, name) for name in MetricsFigures.__dataclass_fields__}


def _is_lock(engine: sa.Engine, exc: sa.exc.OperationalError) -> bool:
    if engine.dialect.name != "sqlite":
        return False
    message = str(exc.orig).lower()
    return "database is locked" in message or "database is busy" in message


def _translate(exc: sa.exc.SQLAlchemyError) -> ContextStoreError:
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return BackendUnavailableError(f"metrics database unavailable: {exc.orig}")
    detail = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return ContextStoreError(f"metrics database error: {detail}")


# -- validation -----------------------------------------------------------------------------


def _aware(name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError(name, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(name, "must be timezone-aware (naive datetimes are ambiguous)")
    return value.astimezone(UTC)


def _text(name: str, value: object, *, limit: int | None, required: bool) -> str:
    if not isinstance(value, str):
        raise ValidationError(name, f"must be a string, got {type(value).__name__}")
    if required and not value:
        raise ValidationError(name, "must not be empty")
    if limit is not None and len(value) > limit:
        raise ValidationError(name, f"must be at most {limit} characters, got {len(value)}")
    # PostgreSQL refuses both in text; refuse them everywhere so both databases agree.
    if "\x00" in value:
        raise ValidationError(name, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(name, "is not valid Unicode (lone surrogate)") from exc
    return value


def _row_values(metric: QueryMetric) -> dict[str, Any]:
    """The INSERT values of one metric, or ``ValidationError`` naming the first bad field."""
    if not isinstance(metric, QueryMetric):
        raise ValidationError("metric", f"must be a QueryMetric, got {type(metric).__name__}")
    values: dict[str, Any] = {"recorded_at": _aware("recorded_at", metric.recorded_at)}
    for name, limit in TEXT_LIMITS.items():
        values[name] = _text(name, getattr(metric, name), limit=limit, required=True)
    if metric.complexity not in COMPLEXITY_ORDER:
        raise ValidationError(
            "complexity", f"must be one of {', '.join(COMPLEXITY_ORDER)}, got {metric.complexity!r}"
        )
    values["complexity"] = metric.complexity
    for name in INT_FIELDS:
        number = getattr(metric, name)
        if isinstance(number, bool) or not isinstance(number, int):
            raise ValidationError(name, f"must be an integer, got {type(number).__name__}")
        if not 0 <= number <= INT32_MAX:
            raise ValidationError(name, f"must be between 0 and {INT32_MAX}, got {number}")
        values[name] = number
    if metric.lessons_included > metric.lessons_matched:
        raise ValidationError(
            "lessons_included",
            f"cannot exceed lessons_matched ({metric.lessons_included} > {metric.lessons_matched})",
        )
    response = metric.response_ms
    if isinstance(response, bool) or not isinstance(response, int | float):
        raise ValidationError("response_ms", f"must be a number, got {type(response).__name__}")
    if not math.isfinite(response) or response < 0:
        raise ValidationError("response_ms", f"must be finite and ≥ 0, got {response!r}")
    values["response_ms"] = float(response)
    for name in ("guard_passed", "cache_hit"):
        flag = getattr(metric, name)
        if not isinstance(flag, bool):
            raise ValidationError(name, f"must be a bool, got {type(flag).__name__}")
        values[name] = flag
    warnings = metric.guard_warnings
    if isinstance(warnings, str) or not isinstance(warnings, tuple | list):
        raise ValidationError("guard_warnings", "must be a tuple of strings")
    values["guard_warnings"] = [
        _text("guard_warnings", warning, limit=None, required=False) for warning in warnings
    ]
    values["query"] = (
        None if metric.query is None else _text("query", metric.query, limit=None, required=False)
    )
    return values


# -- queries ------------------------------------------------------------------------------


def _conditions(
    since: datetime | None,
    until: datetime | None,
    namespace: str | None,
    worker_prefix: str | None,
) -> list[sa.ColumnElement[bool]]:
    """WHERE clauses for the shared filters, validating them (``ValidationError``)."""
    conditions: list[sa.ColumnElement[bool]] = []
    start = None if since is None else _aware("since", since)
    end = None if until is None else _aware("until", until)
    if start is not None and end is not None and start > end:
        raise ValidationError("since", f"is after until ({start} > {end})")
    if start is not None:
        conditions.append(QueryMetricRow.recorded_at >= start)
    if end is not None:
        conditions.append(QueryMetricRow.recorded_at < end)
    if namespace is not None:
        conditions.append(
            QueryMetricRow.namespace == _text("namespace", namespace, limit=None, required=False)
        )
    if worker_prefix:
        prefix = _text("worker_prefix", worker_prefix, limit=None, required=False)
        # substr rather than LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
        conditions.append(sa.func.substr(QueryMetricRow.worker, 1, len(prefix)) == prefix)
    return conditions


def _bucket_index(dialect: str, bucket_seconds: int) -> sa.ColumnElement[int]:
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


def _aggregates(group: _Group | None, *, window: bool) -> list[sa.ColumnElement[Any]]:
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


def _figures(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: _Group | None,
) -> dict[Any, MetricsFigures]:
    """Figures per value of ``group`` (key ``None`` when ungrouped); groups without rows absent.

    Each dialect path is a single statement, so the counts and the percentiles of a group
    always describe the same rows.
    """
    key = (sa.null() if group is None else group).label("g")
    if connection.dialect.name == "postgresql":
        percentiles = [
            sa.func.percentile_cont(fraction).within_group(QueryMetricRow.response_ms)
            for fraction in PERCENTILES
        ]
        statement = sa.select(
            key,
            *_aggregates(group, window=False),
            *[p.label(f"p{i}") for i, p in enumerate(percentiles)],
        ).where(*conditions)
        if group is not None:
            statement = statement.group_by(group)
        results: dict[Any, MetricsFigures] = {}
        for row in connection.execute(statement).mappings():
            if row["n"]:
                values = tuple(row[f"p{i}"] for i in range(len(PERCENTILES)))
                results[row["g"]] = _make_figures(row, values)
        return results
    return _figures_windowed(connection, conditions, group, key)


def _figures_windowed(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    group: _Group | None,
    key: sa.Label[Any],
) -> dict[Any, MetricsFigures]:
    """Percentiles without ``percentile_cont``: rank in SQL, fetch only the needed ranks."""
    rank = sa.func.row_number().over(partition_by=group, order_by=QueryMetricRow.response_ms)
    ranked = (
        sa.select(
            key,
            QueryMetricRow.response_ms.label("v"),
            (rank - 1).label("rk"),
            *_aggregates(group, window=True),
        )
        .where(*conditions)
        .subquery()
    )
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
        values = tuple(_interpolate(ranks, count, fraction) for fraction in PERCENTILES)
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
