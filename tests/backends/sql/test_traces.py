"""Run traces on SQLite and PostgreSQL: what each row records, and the reports over them.

Every figure the database computes from the traces is checked against the same computation
done here in Python over the same rows.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, downgrade, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.metrics.report import GROUPINGS, LessonUsage
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Scope, explain
from contextstore.core.metrics import QueryMetric, RunTrace
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.engine.sync import ContextEngine
from contextstore.errors import ValidationError
from tests.backends.sql.test_metrics_repository import FixedClock, assert_figures
from tests.factories import make_metric

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LESSON_IDS = ("ops.db.failover", "ops.db.backup", "ops.tls", "web.cache", "odd'id%_")
WORKERS = ("alpha-1", "alpha-2", "beta-1", "Alpha-9")


def traced_sample(namespace: str, count: int = 80, seed: int = 11) -> list[QueryMetric]:
    """Metrics with random traces: included lessons are a prefix of the matched ones."""
    rnd = random.Random(seed)
    rows = []
    for index in range(count):
        matched = rnd.sample(LESSON_IDS, rnd.randint(0, len(LESSON_IDS)))
        included = matched[: rnd.randint(0, len(matched))]
        sources = tuple(rnd.choice(["a.md", "b.md", "c.md"]) for _ in range(rnd.randint(0, 3)))
        rows.append(
            make_metric(
                T0 + index * timedelta(minutes=5, seconds=7),
                namespace=namespace,
                worker=WORKERS[index % len(WORKERS)],
                query_hash=f"{index:032x}",
                complexity=rnd.choice(["low", "medium", "high"]),
                intent=rnd.choice(["factual", "reasoning", "code"]),
                lessons_matched=len(matched),
                lessons_included=len(included),
                chunk_count=len(sources),
                response_ms=rnd.choice([round(rnd.uniform(1, 900), 3), 50.0]),
                guard_passed=rnd.random() > 0.2,
                cache_hit=rnd.random() < 0.35,
                trace=RunTrace(
                    scope_entity_ids=("fleet.ops",) if index % 2 else (),
                    scope_tags=("ops",),
                    lessons_matched=tuple(sorted(matched)),
                    lessons_included=tuple(included),
                    chunk_sources=sources,
                ),
            )
        )
    return rows


@pytest.fixture
def metrics(engine: sa.Engine) -> MetricsRepository:
    return MetricsRepository(engine, clock=FixedClock(T0 + timedelta(days=1)))


@pytest.fixture
def rows(metrics: MetricsRepository) -> list[QueryMetric]:
    both = traced_sample("ns") + traced_sample("other", count=30, seed=3)
    metrics.record_many(both)
    return both


def test_a_trace_round_trips_through_its_columns(
    engine: sa.Engine, metrics: MetricsRepository
) -> None:
    trace = RunTrace(("fleet.ops.db",), ("ops", "db"), ("b", "a"), ("b",), ("x.md", "x.md"))
    metrics.record(make_metric(T0, lessons_matched=2, lessons_included=1, trace=trace))
    with engine.connect() as connection:
        stored = connection.execute(sa.select(QueryMetricRow.__table__)).one()
    assert (
        stored.scope_entity_ids,
        stored.scope_tags,
        stored.lessons_matched_ids,
        stored.lessons_included_ids,
        stored.chunk_sources,
    ) == (["fleet.ops.db"], ["ops", "db"], ["b", "a"], ["b"], ["x.md", "x.md"])


@pytest.mark.parametrize(
    ("field", "trace"),
    [
        ("trace", ("a",)),
        ("trace.lessons_included", RunTrace(lessons_included="ab")),  # type: ignore[arg-type]
        ("trace.chunk_sources", RunTrace(chunk_sources=("ok", 3))),  # type: ignore[arg-type]
        ("trace.scope_tags", RunTrace(scope_tags=("nul\x00",))),
        ("trace.scope_entity_ids", RunTrace(scope_entity_ids=("\ud800",))),
    ],
)
def test_a_bad_trace_is_refused_naming_its_field_and_nothing_is_written(
    metrics: MetricsRepository, field: str, trace: Any
) -> None:
    with pytest.raises(ValidationError) as caught:
        metrics.record_many([make_metric(T0), make_metric(T0, trace=trace)])
    assert caught.value.field == field
    assert metrics.count() == 0


def select(rows: list[QueryMetric], **filters: Any) -> list[QueryMetric]:
    """The rows ``filters`` select, computed in Python."""
    kept = []
    for row in rows:
        if "namespace" in filters and row.namespace != filters["namespace"]:
            continue
        if "complexity" in filters and row.complexity != filters["complexity"]:
            continue
        if "intent" in filters and row.intent != filters["intent"]:
            continue
        if "cache_hit" in filters and row.cache_hit != filters["cache_hit"]:
            continue
        if "worker_prefix" in filters and not row.worker.startswith(filters["worker_prefix"]):
            continue
        if "lesson" in filters and filters["lesson"] not in row.trace.lessons_included:
            continue
        if "since" in filters and row.recorded_at < filters["since"]:
            continue
        kept.append(row)
    return kept


FILTERS: list[dict[str, Any]] = [
    {},
    {"namespace": "ns"},
    {"complexity": "medium"},
    {"intent": "code"},
    {"cache_hit": True},
    {"cache_hit": False},
    {"worker_prefix": "alpha"},
    {"lesson": "ops.db.failover"},
    {"lesson": "odd'id%_"},
    {"lesson": "never.included"},
    {"namespace": "ns", "complexity": "high", "cache_hit": False, "lesson": "ops.tls"},
    {"namespace": "other", "intent": "factual", "worker_prefix": "beta"},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "none")
def test_every_filter_equals_the_python_selection(
    metrics: MetricsRepository, rows: list[QueryMetric], filters: dict[str, Any]
) -> None:
    wanted = select(rows, **filters)
    report = metrics.report(**filters)
    assert_figures(report, wanted)
    assert metrics.count(**filters) == len(wanted)
    assert sum(point.runs for point in metrics.series(bucket_seconds=3600, **filters)) == len(
        wanted
    )


def python_groups(rows: list[QueryMetric], by: str) -> dict[str, list[QueryMetric]]:
    groups: dict[str, list[QueryMetric]] = {}
    for row in rows:
        keys = row.trace.lessons_included if by == "lesson" else (getattr(row, by),)
        for key in keys:
            groups.setdefault(key, []).append(row)
    return groups


@pytest.mark.parametrize("by", GROUPINGS)
@pytest.mark.parametrize("filters", [{}, {"namespace": "ns", "cache_hit": False}])
def test_every_grouping_equals_the_python_grouping(
    metrics: MetricsRepository, rows: list[QueryMetric], by: str, filters: dict[str, Any]
) -> None:
    groups = python_groups(select(rows, **filters), by)
    report = metrics.report(by=by, **filters)
    assert report.by == by
    assert {group.key for group in report.groups} == set(groups)
    for group in report.groups:
        assert_figures(group, groups[group.key])
    keys = [group.key for group in report.groups]
    if by == "complexity":
        assert keys == [level for level in ("low", "medium", "high") if level in groups]
    else:
        assert keys == sorted(groups, key=lambda key: (-len(groups[key]), key))


def test_a_report_without_by_has_no_groups_and_a_bad_by_is_refused(
    metrics: MetricsRepository, rows: list[QueryMetric]
) -> None:
    assert metrics.report().groups == ()
    with pytest.raises(ValidationError) as caught:
        metrics.report(by="query")
    assert caught.value.field == "by"
    for name, value in [("lesson", ""), ("cache_hit", "yes"), ("complexity", 3)]:
        with pytest.raises(ValidationError) as caught:
            metrics.report(**{name: value})
        assert caught.value.field == name


def python_stats(rows: list[QueryMetric], statuses: dict[str, str]) -> list[LessonUsage]:
    matched = Counter(lesson for row in rows for lesson in row.trace.lessons_matched)
    included = Counter(lesson for row in rows for lesson in row.trace.lessons_included)
    last: dict[str, datetime] = {}
    for row in rows:
        for lesson in row.trace.lessons_included:
            last[lesson] = max(last.get(lesson, row.recorded_at), row.recorded_at)
    usage = [
        LessonUsage(
            entity_id=lesson,
            status=statuses.get(lesson),
            runs_matched=matched[lesson],
            runs_included=included[lesson],
            last_included_at=last.get(lesson),
        )
        for lesson in set(matched) | set(included)
    ]
    return sorted(usage, key=lambda u: (-u.runs_included, -u.runs_matched, u.entity_id))


def add_lessons(repo: LessonRepository) -> dict[str, str]:
    """Lessons in the table: most of LESSON_IDS, one retired, one never used, one deleted."""
    statuses = {
        "ops.db.failover": "active",
        "ops.db.backup": "retired",
        "ops.tls": "active",
        "never.used": "active",
        "proposed.one": "proposed",
    }
    for entity_id, status in statuses.items():
        repo.add(
            LessonRecord(entity_id, "form", status="active" if status == "retired" else status)
        )
        if status == "retired":
            repo.retire(entity_id)
    return statuses


@pytest.mark.parametrize("filters", [{}, {"namespace": "ns"}, {"since": T0 + timedelta(hours=3)}])
def test_lesson_stats_equal_the_python_counts(
    metrics: MetricsRepository,
    repo: LessonRepository,
    rows: list[QueryMetric],
    filters: dict[str, Any],
) -> None:
    statuses = add_lessons(repo)
    wanted = select(rows, **filters)
    stats = metrics.lesson_stats(**filters)
    assert stats.runs == len(wanted)
    assert list(stats.lessons) == python_stats(wanted, statuses)
    included = {lesson for row in wanted for lesson in row.trace.lessons_included}
    active = sorted(lesson for lesson, status in statuses.items() if status == "active")
    assert stats.unused == tuple(lesson for lesson in active if lesson not in included)
    assert "never.used" in stats.unused


def test_lesson_stats_of_no_runs(metrics: MetricsRepository, repo: LessonRepository) -> None:
    add_lessons(repo)
    stats = metrics.lesson_stats(namespace="nobody")
    assert (stats.runs, stats.lessons, stats.unused) == (
        0,
        (),
        ("never.used", "ops.db.failover", "ops.tls"),
    )
    assert stats.as_dict()["unused"] == ["never.used", "ops.db.failover", "ops.tls"]


# -- the engine writes the trace ------------------------------------------------------------


def test_engine_runs_record_traces_and_stats_count_them_exactly(
    engine: sa.Engine, repo: LessonRepository, metrics: MetricsRepository
) -> None:
    for index, (key, severity) in enumerate(
        [("tag:ops", "critical"), ("tag:ops", "info"), ("id:fleet.db", "warning")] * 3
    ):
        repo.add(
            LessonRecord(
                f"lesson.{index}",
                f"Form {index} about postgres failover" if index % 3 else f"Form {index}",
                severity=severity,
                status="active",
                applies_to=(key,),
                summary="postgres" if index == 4 else "",
                created_at=T0 + timedelta(minutes=index),
            )
        )
    retriever = InMemoryRetriever()
    retriever.add("Postgres failover runbook: promote the standby, then repoint.", "pg.md")
    retriever.add("TLS certificates are rotated monthly by the platform team.", "tls.md")
    context_engine = ContextEngine(
        retriever=retriever,
        lessons=repo,
        metrics=metrics,
        worker="w-1",
        now=lambda: T0 + timedelta(hours=1),
    )
    context_engine.config.lessons.k = 4
    context_engine.config.lessons.order = "relevance"
    scopes = [
        Scope(tags=("ops",)),
        Scope(entity_ids=("fleet.db.main",)),
        Scope(entity_ids=("fleet.db.main",), tags=("ops",)),
        Scope(tags=("nobody",)),
    ]
    matched: Counter[str] = Counter()
    included: Counter[str] = Counter()
    traces = []
    for number in range(12):
        scope = scopes[number % len(scopes)]
        result = context_engine.run(f"postgres failover {number % 5}", scope=scope)
        ids = [item.entity_id for item in result.lessons.included]
        included.update(ids)
        eligible = [e.entity_id for e in explain(repo.candidates(scope), scope) if e.eligible]
        assert len(eligible) == result.lessons.matched_count
        matched.update(eligible)
        traces.append(
            (
                list(scope.entity_ids),
                list(scope.tags),
                sorted(eligible),
                ids,
                [chunk.source for chunk in result.chunks_used],
            )
        )
    with engine.connect() as connection:
        stored = connection.execute(
            sa.select(QueryMetricRow.__table__).order_by(QueryMetricRow.id)
        ).all()
        assert [
            (
                row.scope_entity_ids,
                row.scope_tags,
                row.lessons_matched_ids,
                row.lessons_included_ids,
                row.chunk_sources,
            )
            for row in stored
        ] == traces
    stats = metrics.lesson_stats()
    assert stats.runs == 12
    assert {u.entity_id: u.runs_included for u in stats.lessons} == {
        lesson: included[lesson] for lesson in matched
    }
    assert {u.entity_id: u.runs_matched for u in stats.lessons} == dict(matched)
    assert all(
        u.last_included_at == T0 + timedelta(hours=1) for u in stats.lessons if u.runs_included
    )
    assert stats.unused == tuple(
        sorted(f"lesson.{i}" for i in range(9) if f"lesson.{i}" not in included)
    )


def test_a_run_matching_hundreds_of_lessons_traces_the_64_ranked_first(
    engine: sa.Engine, repo: LessonRepository, metrics: MetricsRepository
) -> None:
    # One row per matched lesson made a run over 1,000 matches write 1,000 index entries: the
    # trace names the included lessons and the next in rank order, 64 in all; the count stays
    # exact.
    repo.import_records(
        LessonRecord(
            f"many.{n:03d}",
            f"Form {n}",
            severity=("info", "warning", "critical")[n % 3],
            status="active",
            applies_to=("tag:ops",),
            created_at=T0 + timedelta(minutes=n),
        )
        for n in range(150)
    )
    context_engine = ContextEngine(
        retriever=InMemoryRetriever(), lessons=repo, metrics=metrics, worker="w-1"
    )
    scope = Scope(tags=("ops",))
    result = context_engine.run("anything", scope=scope)
    ranked = [e.entity_id for e in explain(repo.candidates(scope), scope) if e.eligible]
    included = [item.entity_id for item in result.lessons.included]
    assert (result.lessons.matched_count, included) == (150, ranked[:10])
    with engine.connect() as connection:
        row = connection.execute(sa.select(QueryMetricRow.__table__)).one()
        lesson_rows = connection.execute(
            sa.text("SELECT lesson_id, matched, included FROM query_metric_lessons")
        ).all()
    assert (row.lessons_matched, row.lessons_included) == (150, 10)
    assert row.lessons_matched_ids == sorted(ranked[:64])
    assert row.lessons_included_ids == included
    assert sorted((r.lesson_id, bool(r.matched), bool(r.included)) for r in lesson_rows) == [
        (lesson, True, lesson in included) for lesson in sorted(ranked[:64])
    ]
    usage = {u.entity_id: u.runs_matched for u in metrics.lesson_stats().lessons}
    assert usage == dict.fromkeys(ranked[:64], 1)


# -- migration ------------------------------------------------------------------------------


def test_rows_written_before_traces_keep_working_through_upgrade_and_downgrade(
    empty_database_url: str,
) -> None:
    migrate(empty_database_url, "0003_audit")
    engine = create_database_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO query_metrics (recorded_at, namespace, worker, query_hash, "
                    "complexity, intent, budget, context_length, chunk_count, lessons_matched, "
                    "lessons_included, response_ms, guard_passed, guard_warnings, cache_hit) "
                    "VALUES (:at, 'ns', 'w', 'h', 'low', 'factual', 800, 10, 1, 2, 1, 5.0, "
                    ":yes, '[]', :no)"
                ),
                {"at": T0, "yes": True, "no": False},
            )
        migrate(empty_database_url)
        metrics = MetricsRepository(engine)
        metrics.record(make_metric(T0, namespace="ns", trace=RunTrace(lessons_included=("a",))))
        assert metrics.report(namespace="ns").runs == 2
        assert [g.key for g in metrics.report(by="lesson").groups] == ["a"]
        assert metrics.count(lesson="a") == 1
        stats = metrics.lesson_stats()
        assert (stats.runs, [u.entity_id for u in stats.lessons]) == (2, ["a"])
        with engine.connect() as connection:
            old = connection.execute(
                sa.select(QueryMetricRow.__table__).order_by(QueryMetricRow.id)
            ).first()
            assert old is not None and old.lessons_included_ids == [] and old.chunk_sources == []
        downgrade(empty_database_url, "0003_audit")
        engine.dispose()
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("query_metrics")}
            count = connection.execute(sa.text("SELECT count(*) FROM query_metrics")).scalar()
        assert "lessons_included_ids" not in columns and count == 2
    finally:
        engine.dispose()


@pytest.mark.asyncio
async def test_the_async_engine_records_the_same_traces_and_stats(
    empty_database_url: str,
) -> None:
    from contextstore import connect_async
    from contextstore.sample_data import load_demo_queries, load_lessons, sample_retriever

    async with connect_async(empty_database_url, "", "async-traces") as store:
        await store.lessons.import_records(load_lessons())
        engine = store.engine(retriever=sample_retriever(), worker="async-w")
        engine.config.lessons.order = "relevance"
        included: Counter[str] = Counter()
        sources = []
        for item in load_demo_queries()[:6]:
            result = await engine.run(item.query, scope=item.scope)
            included.update(lesson.entity_id for lesson in result.lessons.included)
            sources.append([chunk.source for chunk in result.chunks_used])
        stats = await store.metrics.lesson_stats(namespace="async-traces")
    assert stats.runs == 6
    assert {u.entity_id: u.runs_included for u in stats.lessons if u.runs_included} == dict(
        included
    )
    engine_sql = create_database_engine(empty_database_url)
    try:
        with engine_sql.connect() as connection:
            stored = connection.execute(
                sa.select(QueryMetricRow.chunk_sources).order_by(QueryMetricRow.id)
            ).scalars()
            assert list(stored) == sources
    finally:
        engine_sql.dispose()
