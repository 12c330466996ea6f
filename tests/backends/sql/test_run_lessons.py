"""``query_metric_lessons``: each run's lessons as rows, kept by triggers (revision 0009).

Whoever writes ``query_metrics`` — the repository, SQL typed by hand, ``prune`` — the lesson
rows follow, on SQLite and PostgreSQL; an odd array typed by hand names what strings it holds
and never makes the row fail. The reports read them: by lesson, by worker (each walked along
an index the group leads, however many groups) and the lesson statistics, compared with the
same computation in Python and with the sorted path over the same rows.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, downgrade, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.metrics import queries as metric_queries
from contextstore.backends.sql.metrics.queries import (
    WALK_GROUPS,
    filter_conditions,
    grouped_figures,
    grouping,
    walk_conditions,
    walks_pay,
)
from contextstore.backends.sql.metrics.report import MetricsFilter
from contextstore.backends.sql.models import RUN_LESSON_COPIES
from contextstore.core.metrics import QueryMetric, RunTrace
from contextstore.errors import ValidationError
from tests.backends.sql.conftest import POSTGRES_ONLY, SQLITE_ONLY
from tests.backends.sql.test_metrics_repository import assert_figures
from tests.backends.sql.test_traces import python_stats
from tests.factories import make_metric

T0 = datetime(2026, 3, 1, tzinfo=UTC)
COPIED = ", ".join(RUN_LESSON_COPIES)
RUN_COLUMNS = (
    "recorded_at, namespace, worker, query_hash, complexity, intent, budget, context_length, "
    "chunk_count, lessons_matched, lessons_included, response_ms, guard_passed, "
    "guard_warnings, cache_hit, lessons_matched_ids, lessons_included_ids"
)


def insert_by_hand(
    connection: sa.Connection, matched: str, included: str, *, worker: str = "w", ms: float = 5.0
) -> int:
    """One run written in SQL, its arrays given as JSON text; returns its id."""
    dialect = connection.dialect.name
    cast = "CAST(:{} AS jsonb)" if dialect == "postgresql" else ":{}"
    connection.execute(
        sa.text(
            f"INSERT INTO query_metrics ({RUN_COLUMNS}) VALUES (:at, 'ns', :worker, 'h', "
            "'low', 'factual', 800, 10, 1, 2, 1, :ms, true, '[]', false, "
            f"{cast.format('matched')}, {cast.format('included')})"
        ),
        {"at": T0, "worker": worker, "ms": ms, "matched": matched, "included": included},
    )
    return int(connection.execute(sa.text("SELECT max(id) FROM query_metrics")).scalar_one())


def lesson_rows(engine: sa.Engine) -> set[tuple[Any, ...]]:
    """(metric_id, lesson_id, matched, included) of every lesson row."""
    with engine.connect() as connection:
        found = connection.exec_driver_sql(
            "SELECT metric_id, lesson_id, matched, included FROM query_metric_lessons"
        ).all()
    return {(row[0], row[1], bool(row[2]), bool(row[3])) for row in found}


def copies_agree(engine: sa.Engine) -> bool:
    """Every lesson row's copied columns equal its run's, and no lesson row lacks its run."""
    pairs = " AND ".join(f"l.{column} = q.{column}" for column in RUN_LESSON_COPIES)
    with engine.connect() as connection:
        stray = connection.exec_driver_sql(
            "SELECT count(*) FROM query_metric_lessons l LEFT JOIN query_metrics q "
            f"ON q.id = l.metric_id AND {pairs} WHERE q.id IS NULL"
        ).scalar_one()
    return stray == 0


def expected_rows(runs: dict[int, tuple[list[Any], list[Any]]]) -> set[tuple[Any, ...]]:
    """What the triggers must write for runs {id: (matched, included)}: string elements only,
    one row per (run, lesson)."""
    rows = set()
    for metric_id, (matched, included) in runs.items():
        strings = [item for item in (*matched, *included) if isinstance(item, str)]
        for lesson in set(strings):
            rows.add((metric_id, lesson, lesson in matched, lesson in included))
    return rows


def test_rows_written_by_hand_updated_and_deleted_keep_their_lessons(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        first = insert_by_hand(connection, '["a", "b", "c"]', '["b", "a"]')
        second = insert_by_hand(connection, '["c"]', '["c", "d"]')
        third = insert_by_hand(connection, "[]", "[]")
    assert lesson_rows(engine) == expected_rows(
        {first: (["a", "b", "c"], ["b", "a"]), second: (["c"], ["c", "d"])}
    )
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE query_metrics SET lessons_included_ids = "
                + ("CAST(:ids AS jsonb)" if engine.dialect.name == "postgresql" else ":ids")
                + " WHERE id = :id"
            ),
            {"ids": '["c"]', "id": first},
        )
        connection.execute(
            sa.text("UPDATE query_metrics SET response_ms = 9.5, worker = 'v' WHERE id = :id"),
            {"id": second},
        )
        connection.execute(
            sa.text("UPDATE query_metrics SET query = 'text' WHERE id = :id"), {"id": third}
        )
    assert lesson_rows(engine) == expected_rows(
        {first: (["a", "b", "c"], ["c"]), second: (["c"], ["c", "d"])}
    )
    assert copies_agree(engine)
    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE query_metrics SET id = 1000 WHERE id = :id"), {"id": second}
        )
        connection.execute(sa.text("DELETE FROM query_metrics WHERE id = :id"), {"id": first})
    assert lesson_rows(engine) == expected_rows({1000: (["c"], ["c", "d"])})
    assert copies_agree(engine)


def test_prune_and_record_keep_the_lesson_rows(engine: sa.Engine) -> None:
    metrics = MetricsRepository(engine)
    trace = RunTrace(lessons_matched=("a", "b"), lessons_included=("a",))
    metrics.record(make_metric(T0, trace=trace))
    metrics.record_many(
        [
            make_metric(T0 + timedelta(hours=hour), trace=trace, lessons_included=1)
            for hour in (1, 2)
        ]
    )
    assert len(lesson_rows(engine)) == 6 and copies_agree(engine)
    assert metrics.prune(T0 + timedelta(minutes=90)) == 2
    with engine.connect() as connection:
        (kept,) = connection.exec_driver_sql("SELECT id FROM query_metrics").scalars()
    assert lesson_rows(engine) == {(kept, "a", True, True), (kept, "b", True, False)}


# Arrays a person may type: each (JSON text, the elements it names as a Python list).
ODD_ARRAYS = {
    "sqlite": [
        ("{not json", []),
        ('{"a": "x"}', []),
        ('"a"', []),
        ("5", []),
        ('[1, null, true, ["x"], {"k": "y"}, "ok", "ok", ""]', [1, "ok", "ok", ""]),
    ],
    "postgresql": [
        ('{"a": "x"}', []),
        ('"a"', []),
        ("5", []),
        ("null", []),
        ('[1, null, true, ["x"], {"k": "y"}, "ok", "ok", ""]', [1, "ok", "ok", ""]),
    ],
}


def test_an_odd_array_typed_by_hand_names_only_its_strings(engine: sa.Engine) -> None:
    runs = {}
    with engine.begin() as connection:
        for text, named in ODD_ARRAYS[engine.dialect.name]:
            runs[insert_by_hand(connection, text, '["x", "x"]')] = (named, ["x", "x"])
            runs[insert_by_hand(connection, "[]", text)] = ([], named)
    assert lesson_rows(engine) == expected_rows(runs)
    assert copies_agree(engine)


@SQLITE_ONLY
def test_sqlite_bytes_that_are_not_utf8_and_a_replaced_row(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        metric_id = insert_by_hand(connection, '["a"]', '["a"]')
    database = sa.make_url(str(engine.url)).database
    assert database is not None
    raw = sqlite3.connect(database)
    raw.text_factory = bytes
    with raw:
        raw.execute(
            "UPDATE query_metrics SET lessons_included_ids = "
            "'[\"' || CAST(x'7780ff' AS TEXT) || '\"]' WHERE id = ?",
            (metric_id,),
        )
        # REPLACE deletes the row it replaces without firing delete triggers.
        raw.execute(
            "INSERT OR REPLACE INTO query_metrics (id, recorded_at, namespace, worker, "
            "query_hash, complexity, intent, budget, context_length, chunk_count, "
            "lessons_matched, lessons_included, response_ms, guard_passed, guard_warnings, "
            "cache_hit, lessons_matched_ids, lessons_included_ids) SELECT id, recorded_at, "
            "namespace, worker, query_hash, complexity, intent, budget, context_length, "
            "chunk_count, lessons_matched, lessons_included, 7.5, guard_passed, "
            "guard_warnings, cache_hit, '[\"b\"]', lessons_included_ids FROM query_metrics "
            "WHERE id = ?",
            (metric_id,),
        )
        found = raw.execute(
            "SELECT lesson_id, matched, included, response_ms FROM query_metric_lessons "
            "ORDER BY lesson_id"
        ).fetchall()
    raw.close()
    assert found == [(b"b", 1, 0, 7.5), (b"w\x80\xff", 0, 1, 7.5)]


@POSTGRES_ONLY
def test_postgresql_truncate_empties_the_lesson_rows(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        insert_by_hand(connection, '["a"]', '["a"]')
        connection.exec_driver_sql("TRUNCATE query_metrics")
    assert lesson_rows(engine) == set()


def test_a_lesson_named_twice_by_one_run_counts_once(engine: sa.Engine) -> None:
    metrics = MetricsRepository(engine)
    twice = RunTrace(lessons_matched=("a", "a"), lessons_included=("a", "a"))
    metrics.record_many(
        [
            make_metric(T0, trace=twice, response_ms=10.0),
            make_metric(T0, trace=RunTrace(lessons_included=("a",)), response_ms=30.0),
        ]
    )
    (group,) = metrics.report(by="lesson").groups
    assert (group.key, group.runs, group.p50_ms) == ("a", 2, 20.0)
    (usage,) = metrics.lesson_stats().lessons
    assert (usage.runs_matched, usage.runs_included) == (1, 2)


def test_the_migration_copies_existing_runs_and_its_downgrade_drops_them(
    empty_database_url: str,
) -> None:
    migrate(empty_database_url, "0008_day_latency_index")
    engine = create_database_engine(empty_database_url)
    try:
        runs = {}
        with engine.begin() as connection:
            for text, named in ODD_ARRAYS[engine.dialect.name]:
                runs[insert_by_hand(connection, text, '["x"]')] = (named, ["x"])
            runs[insert_by_hand(connection, '["a", "b"]', '["b", "b"]')] = (["a", "b"], ["b", "b"])
            insert_by_hand(connection, "[]", "[]")
        migrate(empty_database_url)
        assert lesson_rows(engine) == expected_rows(runs)
        assert copies_agree(engine)
        downgrade(empty_database_url, "0008_day_latency_index")
        engine.dispose()
        with engine.connect() as connection:
            tables = sa.inspect(connection).get_table_names()
            count = connection.exec_driver_sql("SELECT count(*) FROM query_metrics").scalar()
        assert "query_metric_lessons" not in tables and count == len(runs) + 1
        with engine.begin() as connection:
            insert_by_hand(connection, '["a"]', '["a"]')  # no trigger left behind
    finally:
        engine.dispose()


# -- reports over many groups ---------------------------------------------------------------

LESSONS = [f"fleet.lesson.{index:02d}" for index in range(WALK_GROUPS + 5)]
WORKERS = [f"worker-{index:02d}" for index in range(WALK_GROUPS + 4)]


def many_groups(count: int = 240, seed: int = 5) -> list[QueryMetric]:
    """Runs spread over more workers and lessons than ``WALK_GROUPS``, 3 min apart."""
    rnd = random.Random(seed)
    rows = []
    for index in range(count):
        matched = rnd.sample(LESSONS, rnd.randint(0, 4))
        included = matched[: rnd.randint(0, len(matched))]
        rows.append(
            make_metric(
                T0 + index * timedelta(minutes=3),
                namespace="ns" if index % 5 else "other",
                worker=rnd.choice(WORKERS),
                complexity=rnd.choice(["low", "medium", "high"]),
                response_ms=rnd.choice([round(rnd.uniform(1, 900), 3), 50.0, 75.5]),
                context_length=rnd.randint(0, 3000),
                lessons_matched=len(matched),
                lessons_included=len(included),
                guard_passed=rnd.random() > 0.2,
                cache_hit=rnd.random() < 0.3,
                trace=RunTrace(lessons_matched=tuple(matched), lessons_included=tuple(included)),
            )
        )
    return rows


RANGES: list[dict[str, Any]] = [
    {},
    {"since": T0 + timedelta(hours=2)},  # wide
    {"since": T0 + timedelta(hours=3), "until": T0 + timedelta(hours=4)},  # narrow
    {"worker_prefix": "worker-0", "cache_hit": False},
]


def chosen(rows: list[QueryMetric], filters: dict[str, Any]) -> list[QueryMetric]:
    return [
        row
        for row in rows
        if row.namespace == "ns"
        and ("since" not in filters or row.recorded_at >= filters["since"])
        and ("until" not in filters or row.recorded_at < filters["until"])
        and row.worker.startswith(filters.get("worker_prefix", ""))
        and ("cache_hit" not in filters or row.cache_hit == filters["cache_hit"])
    ]


def check_groups(metrics: MetricsRepository, rows: list[QueryMetric]) -> None:
    for filters in RANGES:
        wanted = chosen(rows, filters)
        by_worker = metrics.report(namespace="ns", by="worker", **filters)
        assert {group.key for group in by_worker.groups} == {row.worker for row in wanted}
        for group in by_worker.groups:
            assert_figures(group, [row for row in wanted if row.worker == group.key])
        by_lesson = metrics.report(namespace="ns", by="lesson", **filters)
        named = {lesson for row in wanted for lesson in row.trace.lessons_included}
        assert {group.key for group in by_lesson.groups} == named
        for group in by_lesson.groups:
            assert_figures(
                group, [row for row in wanted if group.key in row.trace.lessons_included]
            )
        if "worker_prefix" not in filters:
            stats = metrics.lesson_stats(
                namespace="ns", since=filters.get("since"), until=filters.get("until")
            )
            assert list(stats.lessons) == python_stats(wanted, {})


def test_reports_by_many_workers_and_lessons_equal_python(engine: sa.Engine) -> None:
    metrics = MetricsRepository(engine)
    rows = many_groups()
    metrics.record_many(rows)
    check_groups(metrics, rows)
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            autocommit.exec_driver_sql("VACUUM query_metrics")
            autocommit.exec_driver_sql("VACUUM query_metric_lessons")
            assert walks_pay(connection, metric_queries.QUERY_METRICS)
            assert walks_pay(connection, metric_queries.RUN_LESSONS)
        check_groups(metrics, rows)


@pytest.mark.parametrize("by", ["worker", "lesson"])
def test_walking_every_group_equals_the_sorted_path(
    engine: sa.Engine, by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rows, the same groups: walked along each group's own index (any number), and
    sorted (PostgreSQL's arrays, SQLite's window), give identical figures."""
    MetricsRepository(engine).record_many(many_groups())
    walks: list[int] = []
    walk = metric_queries.walked_percentiles

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks.append(len(args[3]))
        return walk(*args, **kwargs)

    monkeypatch.setattr(metric_queries, "walked_percentiles", counted)
    chosen_grouping = grouping(by)
    rows = chosen_grouping.rows
    for filters in (MetricsFilter(namespace="ns"), MetricsFilter(namespace="ns", since=T0)):
        dialect = engine.dialect.name
        selected = filter_conditions(filters, dialect, rows=rows)
        conditions = [*selected, *chosen_grouping.where]
        with engine.connect() as connection:
            walk_on = [
                *walk_conditions(connection, filters, selected, rows),
                *chosen_grouping.where,
            ]
            walked = grouped_figures(
                connection,
                conditions,
                chosen_grouping.key,
                rows=rows,
                walk=True,
                walk_on=walk_on,
            )
            unwalked = grouped_figures(connection, conditions, chosen_grouping.key, rows=rows)
        assert len(walked) > WALK_GROUPS
        assert walks == [len(walked)]  # one walk of every group; the other path sorted
        assert walked == unwalked
        walks.clear()


def test_a_report_by_lesson_filtered_by_a_lesson_equals_python(engine: sa.Engine) -> None:
    """Runs that included one lesson, grouped by every lesson they included."""
    metrics = MetricsRepository(engine)
    rows = many_groups()
    metrics.record_many(rows)
    for lesson in LESSONS[:3]:
        wanted = [row for row in chosen(rows, {}) if lesson in row.trace.lessons_included]
        report = metrics.report(namespace="ns", lesson=lesson, by="lesson")
        assert_figures(report, wanted)
        named = {other for row in wanted for other in row.trace.lessons_included}
        assert {group.key for group in report.groups} == named
        for group in report.groups:
            assert_figures(
                group, [row for row in wanted if group.key in row.trace.lessons_included]
            )


@pytest.mark.parametrize("by", ["lesson", "worker", "intent", "complexity"])
def test_groups_alone_equal_the_reports_groups(engine: sa.Engine, by: str) -> None:
    metrics = MetricsRepository(engine)
    metrics.record_many(many_groups())
    for filters in RANGES:
        alone = metrics.groups(by, namespace="ns", **filters)
        assert alone == metrics.report(namespace="ns", by=by, **filters).groups
        assert alone
    with pytest.raises(ValidationError) as caught:
        metrics.groups("query")
    assert caught.value.field == "by"
    with pytest.raises(ValidationError) as caught:
        metrics.groups("lesson", cache_hit="yes")  # type: ignore[arg-type]
    assert caught.value.field == "cache_hit"
