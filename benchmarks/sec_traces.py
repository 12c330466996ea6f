"""Lesson statistics and reports grouped by lesson over many traced runs; the cost of a trace.

Each dialect gets a scratch database holding 1,000,000 metrics rows (20,000 with
``--quick``) with traces drawn from 2,000 lesson ids. Measured, as p50 of repeated calls:

- ``lesson_stats()`` against one hand-written statement that only counts the included ids
  (the least any per-lesson count must read), and ``report(by="lesson")`` against
  ``report()`` over the same rows (what grouping by an unnested array adds);
- ``record()`` of a metric with a typical trace against one without (what a run's trace adds
  to its metrics write).

The plan of the lesson-usage statement is written to the notes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.timing import percentile, timed_call_ms
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.metrics.queries import RUN_LESSONS, filter_conditions
from contextstore.backends.sql.metrics.report import MetricsFilter
from contextstore.backends.sql.metrics.validation import row_values
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.backends.sql.trace_queries import lesson_usage
from contextstore.core.metrics import QueryMetric, RunTrace

LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
NAMESPACE = "bench"
LESSONS = 2_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 10_000

# The least a per-lesson count reads: the included ids of the namespace's rows, unnested.
HAND_WRITTEN = {
    "sqlite": "SELECT e.value, count(*) FROM query_metrics q, json_each(q.lessons_included_ids) e "
    "WHERE q.namespace = :ns GROUP BY e.value",
    "postgresql": "SELECT e.value, count(*) FROM query_metrics q "
    "CROSS JOIN LATERAL jsonb_array_elements_text(q.lessons_included_ids) e(value) "
    "WHERE q.namespace = :ns GROUP BY e.value",
}


def metric(rnd: random.Random, index: int, *, traced: bool = True) -> QueryMetric:
    """A plausible run: 0–8 lessons matched from one of 20 scopes, up to 4 included."""
    group = rnd.randrange(20)
    pool = [f"fleet.lessons.{(group * 100 + i) % LESSONS:05d}" for i in range(12)]
    matched = sorted(rnd.sample(pool, rnd.randint(0, 8)))
    included = tuple(rnd.sample(matched, min(len(matched), rnd.randint(0, 4))))
    trace = RunTrace(
        scope_entity_ids=(f"fleet.agents.g{group}.a{index % 50}",),
        scope_tags=(f"role-{group % 4}",),
        lessons_matched=tuple(matched),
        lessons_included=included,
        chunk_sources=tuple(f"docs/{rnd.randrange(500)}.md" for _ in range(rnd.randint(1, 6))),
    )
    return QueryMetric(
        recorded_at=T0 + timedelta(seconds=index),
        namespace=NAMESPACE,
        worker=f"w-{index % 16}",
        query_hash=f"{index:032x}",
        complexity=rnd.choice(["low", "medium", "high"]),
        intent=rnd.choice(["factual", "procedural", "reasoning"]),
        budget=2000,
        context_length=rnd.randint(200, 4000),
        chunk_count=len(trace.chunk_sources),
        lessons_matched=len(matched),
        lessons_included=len(included),
        response_ms=rnd.uniform(1, 50),
        guard_passed=rnd.random() > 0.05,
        cache_hit=rnd.random() < 0.4,
        trace=trace if traced else RunTrace(),
    )


def load(bench: Bench, engine: sa.Engine, dialect: str, rows: int) -> None:
    rnd = random.Random(11)
    for start in range(0, rows, BATCH):
        values = [row_values(metric(rnd, i)) for i in range(start, min(rows, start + BATCH))]
        with engine.begin() as connection:
            connection.execute(sa.insert(QueryMetricRow), values)
        bench.say(f"{LABELS[dialect]}: loading metrics rows {start + len(values):,} / {rows:,}")
    with engine.begin() as connection:
        connection.execute(sa.text("ANALYZE"))


def p50(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up: caches, prepared plans
    return percentile([timed_call_ms(call) for _ in range(repeats)], 0.5)


def plan(engine: sa.Engine, dialect: str) -> str:
    conditions = filter_conditions(MetricsFilter(namespace=NAMESPACE), dialect, rows=RUN_LESSONS)
    statement = lesson_usage(conditions)
    compiled = statement.compile(engine, compile_kwargs={"literal_binds": True})
    prefix = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
    with engine.connect() as connection:
        lines = connection.exec_driver_sql(prefix + str(compiled)).all()
    if dialect == "sqlite":
        return "; ".join(str(line[-1]) for line in lines)
    return " / ".join(str(line[0]).strip() for line in lines)


def run(bench: Bench, dialect: str) -> list[Row]:
    if dialect == "postgresql":
        bench.services.require_postgres()
    rows = bench.pick(20_000, 1_000_000)
    repeats = bench.pick(3, 7)
    engine = bench.services.engine(bench.services.database_url(dialect, "traces"))
    load(bench, engine, dialect, rows)
    metrics = MetricsRepository(engine)
    section = f"Traces, {LABELS[dialect]}"
    size = f"{rows:,} runs"

    bench.say(f"{LABELS[dialect]}: lesson_stats() and its hand-written floor")
    hand_sql = sa.text(HAND_WRITTEN[dialect])

    def hand() -> Any:
        with engine.connect() as connection:
            return connection.execute(hand_sql, {"ns": NAMESPACE}).all()

    stats_ms = p50(lambda: metrics.lesson_stats(namespace=NAMESPACE), repeats)
    hand_ms = p50(hand, repeats)
    bench.say(f"{LABELS[dialect]}: report(by='lesson') and report()")
    by_lesson_ms = p50(lambda: metrics.report(namespace=NAMESPACE, by="lesson"), repeats)
    report_ms = p50(lambda: metrics.report(namespace=NAMESPACE), repeats)

    bench.say(f"{LABELS[dialect]}: the cost of a trace in record()")
    rnd = random.Random(5)
    writes = bench.pick(30, 200)
    traced = [metric(rnd, rows + i) for i in range(writes)]
    bare = [metric(rnd, rows + writes + i, traced=False) for i in range(writes)]
    traced_ms: list[float] = []
    bare_ms: list[float] = []
    for with_trace, without in zip(traced, bare, strict=True):
        traced_ms.append(timed_call_ms(lambda m=with_trace: metrics.record(m)))  # type: ignore[misc]
        bare_ms.append(timed_call_ms(lambda m=without: metrics.record(m)))  # type: ignore[misc]
    record_traced, record_bare = percentile(traced_ms, 0.5), percentile(bare_ms, 0.5)

    bench.notes.append(
        f"Plan of the lesson-usage statement on {LABELS[dialect]}: {plan(engine, dialect)}"
    )
    return [
        Row(
            section,
            f"lessons stats, {size}, p50",
            ms(stats_ms),
            "hand-written count of included ids",
            ms(hand_ms),
            stats_ms / hand_ms,
            note="matched and included per lesson, last use, unused active lessons",
            values={"ours_ms": stats_ms, "base_ms": hand_ms, "rows": rows},
        ),
        Row(
            section,
            f"metrics report --by lesson, {size}, p50",
            ms(by_lesson_ms),
            "metrics report (no grouping)",
            ms(report_ms),
            by_lesson_ms / report_ms,
            values={"ours_ms": by_lesson_ms, "base_ms": report_ms, "rows": rows},
        ),
        Row(
            section,
            "record() with a trace, p50",
            ms(record_traced),
            "record() without a trace",
            ms(record_bare),
            record_traced / record_bare,
            note="a trace: 1 scope id, 1 tag, ~4 matched, ~2 included, ~3 sources",
            values={"ours_ms": record_traced, "base_ms": record_bare},
        ),
    ]
