"""MetricsRepository on SQLite and PostgreSQL (``engine`` from tests/backends/sql/conftest.py).

Expected figures are computed here in Python from the same metrics: counts, sums and means
exactly; percentiles exactly against ``percentile`` (the one shared definition, PostgreSQL's
``percentile_cont`` arithmetic) and, to a rounding error, against numpy's default.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import (
    PERCENTILES,
    MetricsFigures,
    MetricsFilter,
    MetricsRepository,
    percentile,
)
from contextstore.backends.sql.metrics.queries import filter_conditions, walk_conditions, walks_pay
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.core.metrics import MetricsSink, QueryMetric, RunTrace
from contextstore.errors import BackendUnavailableError, ValidationError
from tests.backends.sql.conftest import POSTGRES_ONLY, flavoured
from tests.factories import make_metric

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LEVELS = ("low", "medium", "high")
WORKERS = ("alpha-1", "alpha-2", "beta-1", "Alpha-9")
FIGURE_FIELDS = tuple(MetricsFigures.__dataclass_fields__)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def metric(**fields: Any) -> QueryMetric:
    return make_metric(fields.pop("recorded_at", T0), **fields)


def sample(namespace: str, count: int = 60, seed: int = 7) -> list[QueryMetric]:
    """Varied metrics, one every 7 min 13 s from T0; ties in response_ms on purpose."""
    rnd = random.Random(seed)
    rows = []
    for index in range(count):
        matched = rnd.randint(0, 6)
        response = rnd.choice([round(rnd.uniform(1, 2500), 3), 100.0, 250.25])
        rows.append(
            metric(
                recorded_at=T0 + index * timedelta(minutes=7, seconds=13),
                namespace=namespace,
                worker=WORKERS[index % len(WORKERS)],
                query_hash=f"{index:032x}",
                complexity=LEVELS[rnd.randrange(3)],
                intent=rnd.choice(["factual", "reasoning", "code"]),
                budget=rnd.choice([800, 2000, 4000]),
                context_length=rnd.randint(0, 5000),
                chunk_count=rnd.randint(0, 8),
                lessons_matched=matched,
                lessons_included=rnd.randint(0, matched),
                response_ms=response,
                guard_passed=rnd.random() > 0.25,
                cache_hit=rnd.random() < 0.3,
                guard_warnings=() if rnd.random() > 0.25 else ("context is too short",),
            )
        )
    return rows


def expected(rows: list[QueryMetric]) -> dict[str, Any]:
    """The figures ``MetricsFigures`` must hold for ``rows``, computed independently."""
    if not rows:
        return {
            name: (
                0 if name in ("runs", "lessons_matched_total", "lessons_included_total") else None
            )
            for name in FIGURE_FIELDS
        }
    n = len(rows)
    ordered = sorted(row.response_ms for row in rows)
    p50, p95, p99 = (percentile(ordered, fraction) for fraction in PERCENTILES)
    return {
        "runs": n,
        "p50_ms": p50,
        "p95_ms": p95,
        "p99_ms": p99,
        "mean_context_length": sum(row.context_length for row in rows) / n,
        "guard_failure_rate": sum(not row.guard_passed for row in rows) / n,
        "cache_hit_rate": sum(row.cache_hit for row in rows) / n,
        "lessons_matched_total": sum(row.lessons_matched for row in rows),
        "lessons_matched_mean": sum(row.lessons_matched for row in rows) / n,
        "lessons_included_total": sum(row.lessons_included for row in rows),
        "lessons_included_mean": sum(row.lessons_included for row in rows) / n,
        "first_recorded_at": min(row.recorded_at for row in rows),
        "last_recorded_at": max(row.recorded_at for row in rows),
    }


def assert_figures(figures: MetricsFigures, rows: list[QueryMetric]) -> None:
    want = expected(rows)
    got = {name: getattr(figures, name) for name in FIGURE_FIELDS}
    assert got == want  # exact: same definition, same arithmetic
    if rows:
        numpy_values = np.percentile([row.response_ms for row in rows], [50, 95, 99])
        for value, reference in zip(
            (figures.p50_ms, figures.p95_ms, figures.p99_ms), numpy_values, strict=True
        ):
            assert value == pytest.approx(float(reference), rel=1e-12, abs=1e-9)


@pytest.fixture
def metrics(engine: sa.Engine, flavour: str, database_url: str) -> Iterator[MetricsRepository]:
    """The repository, then its asyncio twin (``tests.backends.sql.conftest.flavoured``)."""
    from contextstore.backends.sql.aio import AsyncMetricsRepository

    clock = FixedClock(T0 + timedelta(days=1))
    with flavoured(
        flavour,
        database_url,
        lambda: MetricsRepository(engine, clock=clock),
        lambda async_engine: AsyncMetricsRepository(async_engine, clock=clock),
    ) as made:
        yield made


def stored_count(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(sa.text("SELECT count(*) FROM query_metrics")).scalar_one())


# -- writes -----------------------------------------------------------------------------------


def test_repository_is_a_metrics_sink(metrics: MetricsRepository) -> None:
    sink: MetricsSink = metrics
    sink.record(metric())
    assert metrics.count() == 1


def test_record_round_trips_every_column_and_is_visible_to_another_engine(
    metrics: MetricsRepository, database_url: str
) -> None:
    at = datetime(2026, 3, 1, 17, 30, 0, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    metrics.record(
        metric(
            recorded_at=at,
            query="What is the rollout plan? ünïcode",
            guard_warnings=("context is too short (3 characters < 10).", "no valid source"),
            guard_passed=False,
            cache_hit=True,
            response_ms=7,
        )
    )
    # A separate engine (as another process would have) sees the committed row at once.
    other = sa.create_engine(database_url)
    try:
        with other.connect() as connection:
            row = connection.execute(sa.select(QueryMetricRow.__table__)).mappings().one()
    finally:
        other.dispose()
    stored = {key: value for key, value in row.items() if key != "id"}
    assert stored["recorded_at"] == at
    assert stored["recorded_at"].utcoffset() == timedelta(0)
    assert stored["recorded_at"].microsecond == 123456
    assert stored["query"] == "What is the rollout plan? ünïcode"
    assert stored["guard_warnings"] == [
        "context is too short (3 characters < 10).",
        "no valid source",
    ]
    assert (stored["guard_passed"], stored["cache_hit"]) == (False, True)
    assert stored["response_ms"] == 7.0
    assert (stored["namespace"], stored["worker"], stored["complexity"]) == ("ns", "alpha-1", "low")


def test_query_text_is_stored_only_when_given(
    metrics: MetricsRepository, engine: sa.Engine
) -> None:
    metrics.record(metric())
    with engine.connect() as connection:
        assert connection.execute(sa.select(QueryMetricRow.query)).scalar_one() is None


def test_record_many_writes_all_and_reports_how_many(metrics: MetricsRepository) -> None:
    assert metrics.record_many(sample("ns", 25)) == 25
    assert metrics.record_many([]) == 0
    assert metrics.count() == 25


BAD_METRICS: list[tuple[str, dict[str, Any]]] = [
    ("recorded_at", {"recorded_at": datetime(2026, 3, 1)}),  # naive
    ("recorded_at", {"recorded_at": "2026-03-01T00:00:00Z"}),
    ("namespace", {"namespace": ""}),
    ("namespace", {"namespace": "n" * 129}),
    ("namespace", {"namespace": 7}),
    ("worker", {"worker": "w" * 129}),
    ("worker", {"worker": ""}),
    ("query_hash", {"query_hash": "f" * 33}),
    ("complexity", {"complexity": "extreme"}),
    ("complexity", {"complexity": "LOW"}),
    ("intent", {"intent": "i" * 17}),
    ("budget", {"budget": -1}),
    ("context_length", {"context_length": -5}),
    ("context_length", {"context_length": 2**31}),
    ("context_length", {"context_length": 10.0}),
    ("chunk_count", {"chunk_count": True}),
    ("lessons_matched", {"lessons_matched": -1, "lessons_included": 0}),
    ("lessons_included", {"lessons_matched": 2, "lessons_included": 3}),
    ("response_ms", {"response_ms": -0.5}),
    ("response_ms", {"response_ms": math.nan}),
    ("response_ms", {"response_ms": math.inf}),
    ("response_ms", {"response_ms": "12"}),
    ("guard_passed", {"guard_passed": 1}),
    ("cache_hit", {"cache_hit": None}),
    ("guard_warnings", {"guard_warnings": "context is empty"}),
    ("guard_warnings", {"guard_warnings": ("ok", 3)}),
    ("query", {"query": "nul \x00 inside"}),
    ("query", {"query": "lone surrogate \ud800"}),
]


@pytest.mark.parametrize(
    ("field", "fields"), BAD_METRICS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_METRICS)]
)
def test_bad_metric_is_refused_naming_the_field_and_nothing_is_written(
    metrics: MetricsRepository, engine: sa.Engine, field: str, fields: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError) as caught:
        metrics.record(metric(**fields))
    assert caught.value.field == field
    with pytest.raises(ValidationError) as caught_batch:
        metrics.record_many([metric(), metric(**fields), metric()])
    assert caught_batch.value.field == field
    assert stored_count(engine) == 0


def test_record_refuses_something_that_is_not_a_metric(metrics: MetricsRepository) -> None:
    with pytest.raises(ValidationError) as caught:
        metrics.record({"namespace": "ns"})  # type: ignore[arg-type]
    assert caught.value.field == "metric"


# -- report -----------------------------------------------------------------------------------


def test_report_figures_are_exact_for_a_known_set(metrics: MetricsRepository) -> None:
    ours = sample("ns", 60)
    others = sample("other", 20, seed=8)
    metrics.record_many(ours + others)

    report = metrics.report(namespace="ns")
    assert_figures(report, ours)
    assert report.runs == 60
    assert report.namespace == "ns" and report.since is None and report.until is None

    everything = metrics.report()
    assert_figures(everything, ours + others)


def test_report_breaks_figures_down_by_complexity_low_medium_high(
    metrics: MetricsRepository,
) -> None:
    rows = sample("ns", 60)
    metrics.record_many(rows)
    report = metrics.report()
    assert [row.complexity for row in report.by_complexity] == ["low", "medium", "high"]
    for row in report.by_complexity:
        assert_figures(row, [item for item in rows if item.complexity == row.complexity])
    assert sum(row.runs for row in report.by_complexity) == report.runs


def test_a_report_without_levels_has_the_same_overall_figures_and_no_levels(
    metrics: MetricsRepository,
) -> None:
    traced = RunTrace(lessons_included=("lesson.a",))
    rows = [
        replace(row, trace=traced) if index % 4 == 0 else row
        for index, row in enumerate(sample("ns", 60))
    ]
    others = sample("other", 20, seed=8)
    metrics.record_many(rows + others)
    # The lesson filter reads the traces (sorted, not walked): 15 runs.
    assert metrics.report(namespace="ns", lesson="lesson.a", levels=False).runs == 15
    for filters in ({"namespace": "ns"}, {}, {"namespace": "ns", "lesson": "lesson.a"}):
        whole = metrics.report(**filters)
        alone = metrics.report(**filters, levels=False)
        assert alone.by_complexity == ()
        assert len(whole.by_complexity) == 3
        assert {name: getattr(alone, name) for name in FIGURE_FIELDS} == {
            name: getattr(whole, name) for name in FIGURE_FIELDS
        }
    assert_figures(metrics.report(namespace="ns", levels=False), rows)
    grouped = metrics.report(namespace="ns", by="worker", levels=False)
    assert grouped.groups == metrics.report(namespace="ns", by="worker").groups
    for bad in (None, 0, "false"):
        with pytest.raises(ValidationError) as caught:
            metrics.report(levels=bad)
        assert caught.value.field == "levels"


def test_a_level_typed_by_hand_follows_the_three_with_exact_figures(
    metrics: MetricsRepository, engine: sa.Engine
) -> None:
    rows = sample("ns", 60)
    metrics.record_many(rows)
    with engine.begin() as connection:
        for row in rows[:7]:
            connection.execute(
                sa.text("UPDATE query_metrics SET complexity = 'extreme' WHERE query_hash = :h"),
                {"h": row.query_hash},
            )
    typed = [replace(row, complexity="extreme") for row in rows[:7]] + rows[7:]
    report = metrics.report(namespace="ns")
    assert_figures(report, typed)
    assert [row.complexity for row in report.by_complexity] == [
        "low",
        "medium",
        "high",
        "extreme",
    ]
    for level in report.by_complexity:
        assert_figures(level, [row for row in typed if row.complexity == level.complexity])


def test_a_complexity_without_runs_has_zero_and_none_figures(metrics: MetricsRepository) -> None:
    metrics.record_many([metric(complexity="low", response_ms=5), metric(complexity="high")])
    medium = metrics.report().by_complexity[1]
    assert medium.complexity == "medium"
    assert_figures(medium, [])


def test_percentiles_known_values(metrics: MetricsRepository) -> None:
    # 1..10: p50 = 5.5, p95 = 9.55, p99 = 9.91 (linear interpolation, as numpy/percentile_cont)
    metrics.record_many([metric(response_ms=float(value)) for value in range(10, 0, -1)])
    report = metrics.report()
    assert (report.p50_ms, report.p95_ms, report.p99_ms) == (
        5.5,
        percentile(range(1, 11), 0.95),
        percentile(range(1, 11), 0.99),
    )
    assert report.p95_ms == pytest.approx(9.55) and report.p99_ms == pytest.approx(9.91)


def test_a_single_run_is_every_percentile(metrics: MetricsRepository) -> None:
    metrics.record(metric(response_ms=42.25))
    report = metrics.report()
    assert (report.p50_ms, report.p95_ms, report.p99_ms) == (42.25, 42.25, 42.25)


def test_empty_range_gives_zeros_and_none(metrics: MetricsRepository) -> None:
    report = metrics.report()
    assert_figures(report, [])
    assert [row.runs for row in report.by_complexity] == [0, 0, 0]
    assert metrics.count() == 0
    assert metrics.series(bucket_seconds=60) == ()
    metrics.record(metric(recorded_at=T0))
    assert metrics.report(since=T0 + timedelta(seconds=1)).runs == 0


def test_time_range_is_since_inclusive_until_exclusive(metrics: MetricsRepository) -> None:
    rows = sample("ns", 30)
    metrics.record_many(rows)
    since, until = rows[5].recorded_at, rows[20].recorded_at
    chosen = rows[5:20]
    assert_figures(metrics.report(since=since, until=until), chosen)
    assert metrics.count(since=since, until=until) == 15
    assert metrics.count(since=since) == 25
    assert metrics.count(until=until) == 20
    # The same instants written in another offset select the same rows.
    plus_two = timezone(timedelta(hours=2))
    assert metrics.count(since=since.astimezone(plus_two), until=until.astimezone(plus_two)) == 15
    assert metrics.count(since=until, until=until) == 0
    shifted = metrics.report(since=since.astimezone(plus_two))
    assert shifted.since == since and shifted.since.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("field", "filters"),
    [
        ("since", {"since": datetime(2026, 3, 1)}),
        ("until", {"until": datetime(2026, 3, 1)}),
        ("since", {"since": T0 + timedelta(hours=1), "until": T0}),
        ("since", {"since": "an hour ago"}),
        ("until", {"until": 3600}),
        ("complexity", {"complexity": "extreme"}),
    ],
)
def test_bad_filters_are_refused(
    metrics: MetricsRepository, field: str, filters: dict[str, Any]
) -> None:
    for method in (metrics.report, metrics.count, metrics.series):
        with pytest.raises(ValidationError) as caught:
            method(**filters)
        assert caught.value.field == field


def test_namespace_and_worker_prefix_filters(metrics: MetricsRepository) -> None:
    ours = sample("ns", 40)
    others = sample("ns-2", 12, seed=9)
    metrics.record_many(ours + others)
    alpha = [row for row in ours if row.worker.startswith("alpha")]
    assert_figures(metrics.report(namespace="ns", worker_prefix="alpha"), alpha)
    assert metrics.count(namespace="ns", worker_prefix="alpha") == 20  # not "Alpha-9"
    assert metrics.count(namespace="ns", worker_prefix="Alpha") == 10
    assert metrics.count(namespace="ns", worker_prefix="alpha-2") == 10
    assert metrics.count(namespace="ns", worker_prefix="") == 40
    assert metrics.count(namespace="n") == 0  # namespaces match exactly
    assert metrics.count(worker_prefix="beta") == 10 + 3


def test_worker_prefix_treats_like_wildcards_literally(metrics: MetricsRepository) -> None:
    metrics.record_many([metric(worker="a%b"), metric(worker="axb"), metric(worker="a_c")])
    assert metrics.count(worker_prefix="a%") == 1
    assert metrics.count(worker_prefix="a_") == 1
    assert metrics.count(worker_prefix="a") == 3


def test_report_as_dict_is_json_ready(metrics: MetricsRepository) -> None:
    metrics.record_many(sample("ns", 10))
    data = json.loads(json.dumps(metrics.report(since=T0).as_dict()))
    assert data["runs"] == 10
    assert data["since"] == T0.isoformat()
    assert [row["complexity"] for row in data["by_complexity"]] == ["low", "medium", "high"]
    assert data["first_recorded_at"] == T0.isoformat()


# -- series -----------------------------------------------------------------------------------


def test_series_buckets_are_epoch_aligned_and_exact(metrics: MetricsRepository) -> None:
    rows = sample("ns", 60)  # 7 min 13 s apart from T0 (midnight): about 8 per hour
    metrics.record_many(rows)
    series = metrics.series(bucket_seconds=3600, namespace="ns")
    assert [point.bucket_start for point in series] == [T0 + timedelta(hours=h) for h in range(8)]
    for point in series:
        end = point.bucket_start + timedelta(hours=1)
        assert point.bucket_seconds == 3600
        assert_figures(point, [row for row in rows if point.bucket_start <= row.recorded_at < end])
    assert sum(point.runs for point in series) == 60


def test_series_omits_empty_buckets_and_respects_filters(metrics: MetricsRepository) -> None:
    metrics.record_many(
        [
            metric(recorded_at=T0 + timedelta(minutes=1)),
            metric(recorded_at=T0 + timedelta(minutes=59, seconds=59, microseconds=999999)),
            metric(recorded_at=T0 + timedelta(hours=5)),
            metric(recorded_at=T0 + timedelta(hours=5), worker="beta"),
        ]
    )
    series = metrics.series(bucket_seconds=3600, worker_prefix="alpha")
    assert [(point.bucket_start, point.runs) for point in series] == [
        (T0, 2),
        (T0 + timedelta(hours=5), 1),
    ]
    assert metrics.series(bucket_seconds=900, since=T0 + timedelta(hours=1))[0].runs == 2


def test_series_buckets_cut_by_since_and_until_hold_only_the_range(
    metrics: MetricsRepository,
) -> None:
    rows = sample("ns", 60)  # about 8 per hour from T0 (midnight)
    metrics.record_many(rows)
    since = T0 + timedelta(minutes=95)
    until = T0 + timedelta(hours=5, minutes=20)
    series = metrics.series(bucket_seconds=3600, since=since, until=until, namespace="ns")
    assert [point.bucket_start for point in series] == [
        T0 + timedelta(hours=h) for h in range(1, 6)
    ]
    for point in series:
        end = point.bucket_start + timedelta(hours=1)
        assert_figures(
            point,
            [
                row
                for row in rows
                if max(point.bucket_start, since) <= row.recorded_at < min(end, until)
            ],
        )
    assert sum(point.runs for point in series) == sum(
        since <= row.recorded_at < until for row in rows
    )


def test_a_wide_and_a_narrow_dated_range_report_exact_figures(
    metrics: MetricsRepository, engine: sa.Engine
) -> None:
    """SQLite walks a range holding a quarter of the rows or more and sorts a narrower one
    (``walk_conditions``); both give the exact figures, on either database."""
    rows = sample("ns", 80)  # 7 min 13 s apart from T0: about 9 h 30 min
    metrics.record_many(rows)
    wide = (T0 + timedelta(hours=1), T0 + timedelta(hours=8))
    narrow = (T0 + timedelta(hours=2), T0 + timedelta(hours=3, minutes=30))
    for since, until in (wide, narrow):
        report = metrics.report(since=since, until=until, namespace="ns", by="intent")
        chosen = [row for row in rows if since <= row.recorded_at < until]
        assert_figures(report, chosen)
        for level in report.by_complexity:
            assert_figures(level, [row for row in chosen if row.complexity == level.complexity])
        for group in report.groups:
            assert_figures(group, [row for row in chosen if row.intent == group.key])
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            for (since, until), walked in ((wide, True), (narrow, False)):
                filters = MetricsFilter(since=since, until=until, namespace="ns")
                conditions = filter_conditions(filters, "sqlite")
                chosen_conditions = walk_conditions(connection, filters, conditions)
                compiled = " ".join(str(condition) for condition in chosen_conditions)
                assert ("+query_metrics.recorded_at" in compiled) is walked


@POSTGRES_ONLY
def test_postgresql_reports_the_same_figures_sorted_or_walked(engine: sa.Engine) -> None:
    """Sorted while the table's pages are not known all-visible, walked once VACUUM marks
    them: the same exact figures either way."""
    metrics = MetricsRepository(engine)
    rows = sample("ns", 60) + sample("other", 20, seed=8)
    metrics.record_many(rows)
    ours = [row for row in rows if row.namespace == "ns"]

    def check() -> None:
        report = metrics.report(namespace="ns", by="worker")
        assert_figures(report, ours)
        assert_figures(metrics.report(namespace="ns", levels=False), ours)
        for level in report.by_complexity:
            assert_figures(level, [row for row in ours if row.complexity == level.complexity])
        for group in report.groups:
            assert_figures(group, [row for row in ours if row.worker == group.key])

    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "ANALYZE query_metrics"
        )
        assert not walks_pay(connection)
    check()
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM query_metrics"
        )
        assert walks_pay(connection)
    check()


@pytest.mark.parametrize("bucket", [86400, 21600, 10800])
def test_day_and_part_of_day_buckets_are_exact_whole_cut_and_filtered(
    metrics: MetricsRepository, bucket: int
) -> None:
    """Buckets of a day, 6 h and 3 h (SQLite walks them along the day index): whole, cut by
    since and until, a worker filter, and a lesson filter (no index holds the traces:
    ranked)."""
    traced = RunTrace(lessons_matched=("lesson-1",), lessons_included=("lesson-1",))
    rows = [
        replace(
            row,
            recorded_at=T0 + index * timedelta(hours=2, minutes=17),
            trace=traced if index % 3 == 0 else RunTrace(),
        )
        for index, row in enumerate(sample("ns", 70))
    ]  # about 6 days
    metrics.record_many(rows)
    since = T0 + timedelta(days=1, hours=5)
    until = T0 + timedelta(days=4, hours=20)
    cases: list[tuple[dict[str, Any], Any]] = [
        ({}, lambda row: True),
        ({"since": since, "until": until}, lambda row: since <= row.recorded_at < until),
        ({"worker_prefix": "alpha"}, lambda row: row.worker.startswith("alpha")),
        ({"lesson": "lesson-1"}, lambda row: "lesson-1" in row.trace.lessons_included),
    ]
    for filters, keep in cases:
        chosen = [row for row in rows if keep(row)]
        series = metrics.series(bucket_seconds=bucket, namespace="ns", **filters)
        size = timedelta(seconds=bucket)
        starts = sorted({T0 + (row.recorded_at - T0) // size * size for row in chosen})
        assert [point.bucket_start for point in series] == starts
        for point in series:
            end = point.bucket_start + size
            assert_figures(
                point, [row for row in chosen if point.bucket_start <= row.recorded_at < end]
            )


def test_series_before_1970_floors_rather_than_truncates(metrics: MetricsRepository) -> None:
    early = datetime(1969, 12, 31, 23, 30, tzinfo=UTC)
    metrics.record(metric(recorded_at=early))
    (point,) = metrics.series(bucket_seconds=3600)
    assert point.bucket_start == datetime(1969, 12, 31, 23, 0, tzinfo=UTC)


@pytest.mark.parametrize("bucket", [0, -60, 1.5, True, "1h"])
def test_series_refuses_a_bad_bucket(metrics: MetricsRepository, bucket: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        metrics.series(bucket_seconds=bucket)
    assert caught.value.field == "bucket_seconds"


# -- prune ------------------------------------------------------------------------------------


def test_prune_deletes_exactly_the_rows_before_the_cutoff(metrics: MetricsRepository) -> None:
    rows = sample("ns", 30) + sample("other", 30, seed=3)
    metrics.record_many(rows)
    cutoff = rows[10].recorded_at  # the row at the cutoff itself is kept
    assert metrics.prune(cutoff, namespace="ns") == 10
    assert metrics.count(namespace="ns") == 20
    assert metrics.count(namespace="other") == 30
    assert metrics.prune(cutoff, namespace="ns") == 0
    assert metrics.prune(cutoff) == 10
    assert metrics.count() == 40
    assert metrics.report().first_recorded_at == cutoff


def test_prune_by_age_measures_from_the_clock(engine: sa.Engine) -> None:
    clock = FixedClock(T0 + timedelta(days=40))
    metrics = MetricsRepository(engine, clock=clock)
    metrics.record_many(
        [
            metric(recorded_at=T0),  # 40 days old
            metric(recorded_at=T0 + timedelta(days=10)),  # exactly 30 days old: kept
            metric(recorded_at=T0 + timedelta(days=39)),
        ]
    )
    assert metrics.cutoff(timedelta(days=30)) == T0 + timedelta(days=10)
    assert metrics.prune(timedelta(days=30)) == 1
    assert metrics.count() == 2
    assert metrics.prune(timedelta(0)) == 2


@pytest.mark.parametrize(
    "older_than",
    [timedelta(seconds=-1), datetime(2026, 1, 1), "30 days", 30],
    ids=["negative", "naive", "text", "number"],
)
def test_prune_refuses_a_bad_cutoff(
    metrics: MetricsRepository, engine: sa.Engine, older_than: Any
) -> None:
    metrics.record(metric())
    with pytest.raises(ValidationError) as caught:
        metrics.prune(older_than)
    assert caught.value.field == "older_than"
    assert stored_count(engine) == 1


def test_instants_take_every_form_and_choices_any_case(metrics: MetricsRepository) -> None:
    """The clock is T0 + 1 day: ``"24h"`` is T0, as the ``timedelta`` and the ISO text are."""
    metrics.record_many(
        [
            metric(recorded_at=T0 - timedelta(hours=1), complexity="high", intent="code"),
            metric(recorded_at=T0 + timedelta(hours=1), complexity="high", intent="procedural"),
            metric(recorded_at=T0 + timedelta(hours=2), complexity="low", intent="code"),
        ]
    )
    for since in ("24h", "1d", timedelta(hours=24), "2026-03-01", "2026-03-01T01:00:00+01:00", T0):
        assert metrics.report(since=since).runs == 2, since
        assert metrics.count(until=since) == 1, since
    report = metrics.report(since="24h", complexity="HIGH", intent="Procedural")
    assert (report.runs, report.since, report.complexity, report.intent) == (
        1,
        T0,
        "high",
        "procedural",
    )
    assert metrics.lesson_stats(since="24h").since == T0
    assert metrics.cutoff("24h") == T0
    assert metrics.prune("24h") == 1
    assert metrics.count() == 2


@pytest.mark.parametrize(
    ("filters", "field", "allowed"),
    [
        ({"complexity": "HIGHEST"}, "complexity", "low, medium, high"),
        (
            {"intent": "procedurall"},
            "intent",
            "factual, reasoning, comparative, procedural, code, summarize, unknown",
        ),
    ],
)
def test_an_unknown_choice_is_refused_with_the_allowed_values(
    metrics: MetricsRepository, filters: dict[str, str], field: str, allowed: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        metrics.report(**filters)
    assert caught.value.field == field
    assert caught.value.message.endswith(f"is not one of {allowed}")


# -- the percentile definition ---------------------------------------------------------------


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=60))
def test_percentile_matches_numpy_linear(values: list[float]) -> None:
    ordered = sorted(values)
    for fraction in (0.0, *PERCENTILES, 1.0):
        reference = float(np.percentile(values, fraction * 100))
        assert percentile(ordered, fraction) == pytest.approx(reference, rel=1e-12, abs=1e-9)


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 0.5) is None


@pytest.mark.parametrize("fraction", [-0.01, 1.01, math.nan])
def test_percentile_refuses_a_fraction_outside_zero_to_one(fraction: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], fraction)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(
        st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=40,
    )
)
def test_database_percentiles_equal_the_definition_exactly(
    metrics: MetricsRepository, values: list[float]
) -> None:
    namespace = uuid.uuid4().hex  # one namespace per example: the database is shared
    metrics.record_many(
        [replace(metric(), namespace=namespace, response_ms=value) for value in values]
    )
    report = metrics.report(namespace=namespace)
    ordered = sorted(values)
    assert (report.p50_ms, report.p95_ms, report.p99_ms) == tuple(
        percentile(ordered, fraction) for fraction in PERCENTILES
    )


# -- database failures ------------------------------------------------------------------------


class FlakyEngine:
    """Delegates to a real engine, but the first ``failures`` connections or transactions
    fail at once. Engines derived with ``execution_options`` share the count."""

    def __init__(
        self,
        engine: sa.Engine,
        failures: int,
        message: str = "database is locked",
        attempts: list[int] | None = None,
    ):
        self.engine = engine
        self.dialect = engine.dialect
        self.failures = failures
        self.message = message
        self._attempts = attempts if attempts is not None else [0]

    @property
    def attempts(self) -> int:
        return self._attempts[0]

    def execution_options(self, **options: Any) -> FlakyEngine:
        derived = self.engine.execution_options(**options)
        return FlakyEngine(derived, self.failures, self.message, self._attempts)

    def _attempt(self) -> None:
        self._attempts[0] += 1
        if self._attempts[0] <= self.failures:
            raise sa.exc.OperationalError("BEGIN IMMEDIATE", {}, Exception(self.message))

    def begin(self) -> Any:
        self._attempt()
        return self.engine.begin()

    def connect(self) -> Any:
        self._attempt()
        return self.engine.connect()

    def raw_connection(self) -> Any:
        self._attempt()
        return self.engine.raw_connection()


def test_an_immediate_sqlite_lock_is_retried_not_reported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flaky.db'}"
    migrate(url)
    engine = create_database_engine(url)
    try:
        flaky = FlakyEngine(engine, failures=2)
        MetricsRepository(flaky).record(metric())  # type: ignore[arg-type]
        assert flaky.attempts == 3
        assert stored_count(engine) == 1
    finally:
        engine.dispose()


def test_a_persistent_failure_becomes_backend_unavailable(engine: sa.Engine) -> None:
    flaky = FlakyEngine(engine, failures=100, message="disk I/O error")
    with pytest.raises(BackendUnavailableError) as caught:
        MetricsRepository(flaky).record(metric())  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    assert flaky.attempts == 1  # not a lock: no retry
    assert stored_count(engine) == 0


def test_an_unreachable_database_is_reported_as_backend_unavailable() -> None:
    engine = create_database_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    try:
        metrics = MetricsRepository(engine)
        with pytest.raises(BackendUnavailableError):
            metrics.record(metric())
        with pytest.raises(BackendUnavailableError):
            metrics.report()
    finally:
        engine.dispose()


def test_span_is_the_first_and_last_run_of_a_namespace(metrics: MetricsRepository) -> None:
    assert metrics.span() == (None, None)
    early = datetime(2026, 1, 1, 0, 0, 1, 250, tzinfo=UTC)
    late = datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC)
    metrics.record_many(
        [
            make_metric(late, namespace="a"),
            make_metric(early, namespace="a"),
            make_metric(early - timedelta(days=1), namespace="b"),
        ]
    )
    assert metrics.span(namespace="a") == (early, late)
    assert metrics.span(namespace="b") == (early - timedelta(days=1),) * 2
    assert metrics.span() == (early - timedelta(days=1), late)
    assert metrics.span(namespace="c") == (None, None)
