"""ContextEngine.run: the pipeline's order, caching rules, fresh lessons, records, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.memory.cache import MemoryContextCache
from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.sql.aio import AsyncMetricsRepository, create_async_database_engine
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.models import QueryMetricRow
from contextstore.config import ContextEngineConfig, GuardConfig
from contextstore.core.compose import Chunk
from contextstore.core.lessons import InMemoryLessons, LessonRecord
from contextstore.core.matching import Scope
from contextstore.core.metrics import MemoryMetrics
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.sync import ContextEngine
from contextstore.errors import ValidationError
from tests.aio import Blocking

DOCS = [
    (
        "Postgres failover: confirm replica lag below five seconds before promoting a replica. "
        "Then repoint the connection pooler and announce the change in the incident channel.",
        "runbook/postgres-failover",
    ),
    (
        "Refunds are granted within 30 days of purchase for annual plans; monthly plans are "
        "refunded pro rata only when an outage breached the SLA.",
        "policy/refunds",
    ),
    (
        "Every database migration must be reversible and tested on a copy of production data "
        "before it is merged; destructive steps go in a later release.",
        "guide/migrations",
    ),
]


def lesson(
    entity_id: str, form: str, keys: tuple[str, ...], severity: str = "warning"
) -> LessonRecord:
    return LessonRecord(
        entity_id=entity_id,
        injection_form=form,
        severity=severity,
        status="active",
        applies_to=keys,
        created_at=datetime(2026, 5, 1, tzinfo=UTC),
    )


class CountingRetriever:
    """Wraps a retriever and counts calls, to tell cache hits from misses."""

    def __init__(self, inner: InMemoryRetriever) -> None:
        self.inner = inner
        self.calls = 0

    def retrieve(self, query: str, analysis: Any, top_k: int, filters: Any = None) -> list[Chunk]:
        self.calls += 1
        return self.inner.retrieve(query, analysis, top_k, filters)


@pytest.fixture
def retriever() -> CountingRetriever:
    inner = InMemoryRetriever()
    for text, source in DOCS:
        inner.add(text, source, {"team": source.split("/")[0]})
    return CountingRetriever(inner)


@pytest.fixture
def lessons() -> InMemoryLessons:
    return InMemoryLessons(
        [
            lesson(
                "nw.lessons.ops.db.failover.0001", "Never promote a lagging replica.", ("tag:ops",)
            ),
            lesson(
                "nw.lessons.support.billing.refund.0002",
                "Quote the refund window.",
                ("tag:support",),
            ),
        ]
    )


@pytest.fixture(params=["sync", "async"])
def runner(request: pytest.FixtureRequest) -> Iterator[asyncio.Runner | None]:
    """``None`` for ``ContextEngine``; the event loop ``AsyncContextEngine`` runs on."""
    if request.param == "sync":
        yield None
        return
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture
def engine_class(runner: asyncio.Runner | None) -> Callable[..., Any]:
    """``ContextEngine``, then ``AsyncContextEngine`` driven through ``Blocking``: every test
    here runs on both engines, which share one pipeline and must behave identically."""
    if runner is None:
        return ContextEngine
    return lambda *args, **kwargs: Blocking(AsyncContextEngine(*args, **kwargs), runner)


@dataclass
class Metrics:
    """A metrics sink for the engine under test, and what it holds, read back."""

    sink: Any
    rows: Callable[[], list[Any]]


@pytest.fixture(params=["memory", "sqlite"])
def new_metrics(
    request: pytest.FixtureRequest, runner: asyncio.Runner | None, tmp_path: Path
) -> Iterator[Callable[[], Metrics]]:
    """Fresh metrics backends: ``MemoryMetrics``, or the SQL metrics store on a SQLite file
    (its asyncio twin for the async engine) whose rows are read back with SQL."""
    disposals: list[Callable[[], None]] = []

    def make() -> Metrics:
        if request.param == "memory":
            memory = MemoryMetrics()
            return Metrics(memory, lambda: list(memory.rows))
        url = f"sqlite:///{tmp_path / f'metrics{len(disposals)}.db'}"
        migrate(url)
        reader = create_database_engine(url)
        disposals.append(reader.dispose)
        if runner is None:
            sink: Any = MetricsRepository(reader)
        else:
            async_engine = create_async_database_engine(url)
            disposals.append(lambda: runner.run(async_engine.dispose()))
            sink = AsyncMetricsRepository(async_engine)

        def rows() -> list[Any]:
            with Session(reader) as session:
                query = sa.select(QueryMetricRow).order_by(QueryMetricRow.id)
                return list(session.scalars(query))

        return Metrics(sink, rows)

    yield make
    for dispose in reversed(disposals):
        dispose()


@pytest.fixture
def make_engine(
    engine_class: Callable[..., Any], new_metrics: Callable[[], Metrics]
) -> Callable[..., Any]:
    def make(retriever: CountingRetriever, lessons: InMemoryLessons, **kwargs: Any) -> Any:
        kwargs.setdefault("metrics", new_metrics().sink)
        return engine_class(retriever=retriever, lessons=lessons, worker="w1", **kwargs)

    return make


def test_second_identical_run_is_a_cache_hit_with_the_same_context(
    retriever, lessons, make_engine
) -> None:
    engine = make_engine(retriever, lessons)
    scope = Scope(tags=("ops",))
    first = engine.run("How do I fail over Postgres when replica lag is high?", scope=scope)
    second = engine.run("  how do I fail over postgres when replica lag is high?", scope=scope)
    assert first.cache_hit is False and second.cache_hit is True
    assert retriever.calls == 1
    assert second.context == first.context
    assert [c.source for c in second.chunks_used] == [c.source for c in first.chunks_used]
    assert second.totals == first.totals
    assert first.chunks_used[0].source == "runbook/postgres-failover"
    assert "[Source: runbook/postgres-failover]" in first.context


def test_scope_namespace_budget_and_filters_each_get_their_own_entry(
    retriever, lessons, make_engine, engine_class
) -> None:
    query = "How do I fail over Postgres when replica lag is high?"
    cache = MemoryContextCache()
    engine = make_engine(retriever, lessons, cache=cache)
    engine.run(query, scope=Scope(tags=("ops",)))
    engine.run(query, scope=Scope(tags=("support",)))
    engine.run(query, scope=Scope(tags=("ops",)), override_budget=500)
    engine.run(query, scope=Scope(tags=("ops",)), filters={"team": "runbook"})
    other_tenant = engine_class(
        ContextEngineConfig(namespace="tenant-b"), retriever=retriever, cache=cache
    )
    other_tenant.run(query, scope=Scope(tags=("ops",)))
    assert retriever.calls == 5
    assert cache.stats()["size"] == 5


def test_lessons_are_matched_fresh_even_on_a_cache_hit(retriever, lessons, make_engine) -> None:
    engine = make_engine(retriever, lessons)
    scope = Scope(tags=("ops",))
    query = "How do I fail over Postgres when replica lag is high?"
    first = engine.run(query, scope=scope)
    assert first.lesson_block == (
        "[Lessons — durable guidance distilled from prior work; matched 1, showing 1]\n"
        "- Never promote a lagging replica. (nw.lessons.ops.db.failover.0001)"
    )
    lessons.add(
        lesson("nw.lessons.ops.db.pooler.0003", "Drain the pooler first.", ("tag:ops",), "critical")
    )
    second = engine.run(query, scope=scope)
    assert second.cache_hit is True
    assert second.lessons.matched_count == 2
    assert (
        second.lesson_block.splitlines()[1]
        == "- Drain the pooler first. (nw.lessons.ops.db.pooler.0003)"
    )
    assert second.prompt == second.lesson_block + "\n\n" + second.context


def test_a_context_that_fails_the_guard_is_returned_but_not_cached(
    retriever, lessons, make_engine
) -> None:
    config = ContextEngineConfig(guard=GuardConfig(min_context_length=100_000))
    cache = MemoryContextCache()
    engine = make_engine(retriever, lessons, cache=cache, config=config)
    query = "What is the refund window for annual plans?"
    result = engine.run(query, scope=Scope(tags=("support",)))
    assert result.guard_passed is False
    assert result.context != ""
    assert result.guard_warnings[0] == (
        f"context is too short ({result.context_length} characters < 100000)."
    )
    assert cache.stats()["size"] == 0
    assert engine.run(query, scope=Scope(tags=("support",))).cache_hit is False
    assert retriever.calls == 2


def test_every_run_records_one_metric_and_one_window_sample(
    retriever, lessons, make_engine, new_metrics
) -> None:
    metrics = new_metrics()
    windows = MemoryWindows()
    moments = iter([datetime(2026, 11, 30, 12, 0, s, tzinfo=UTC) for s in range(10)])
    engine = make_engine(
        retriever, lessons, metrics=metrics.sink, windows=windows, now=lambda: next(moments)
    )
    scope = Scope(tags=("ops",))
    engine.run("What is the refund window?", scope=scope)
    hit = engine.run("What is the refund window?", scope=scope)
    assert windows.summary().total_queries == 2
    rows = metrics.rows()
    assert [row.cache_hit for row in rows] == [False, True]
    assert rows[0].recorded_at == datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    row = rows[1]
    assert row.recorded_at == datetime(2026, 11, 30, 12, 0, 1, tzinfo=UTC)
    assert row.worker == "w1" and row.namespace == "default"
    assert row.query is None and len(row.query_hash) == 32
    assert row.complexity == hit.query_analysis.complexity.value
    assert row.context_length == hit.context_length
    assert row.lessons_matched == 1 and row.lessons_included == 1
    assert row.budget == hit.budget


def test_raw_query_is_stored_only_when_configured(
    retriever, lessons, make_engine, new_metrics
) -> None:
    metrics = new_metrics()
    config = ContextEngineConfig(store_raw_query=True)
    make_engine(retriever, lessons, metrics=metrics.sink, config=config).run(
        "What is the refund window?"
    )
    assert [row.query for row in metrics.rows()] == ["What is the refund window?"]
    hidden = new_metrics()
    make_engine(retriever, lessons, metrics=hidden.sink).run("What is the refund window?")
    assert [row.query for row in hidden.rows()] == [None]


def test_override_budget_replaces_the_adaptive_suggestion(retriever, lessons, make_engine) -> None:
    engine = make_engine(retriever, lessons)
    result = engine.run("How do I fail over Postgres?", override_budget=120)
    assert result.budget == 120
    assert result.context_length <= 120


def test_default_budget_comes_from_the_analysis(retriever, lessons, make_engine) -> None:
    engine = make_engine(retriever, lessons)
    result = engine.run("What is the refund window?")
    assert result.budget == result.query_analysis.context_budget == 800


def test_run_multi_splits_the_global_budget_by_complexity(retriever, lessons, make_engine) -> None:
    engine = make_engine(retriever, lessons)
    queries = [
        "What is the refund window?",
        "Compare the refund policy for annual plans with the policy for monthly plans",
    ]
    results = engine.run_multi(queries, 3500)
    # weights LOW 1.0 and HIGH 2.5: int(3500/3.5)=1000, int(3500*2.5/3.5)=2500
    assert [r.budget for r in results] == [1000, 2500]
    assert engine.run_multi([], 100) == []


def test_a_scope_with_no_matching_lesson_gives_an_empty_block(
    retriever, lessons, make_engine
) -> None:
    result = make_engine(retriever, lessons).run(
        "What is the refund window?", scope=Scope(tags=("coding",))
    )
    assert result.lesson_block == ""
    assert result.lessons.matched_count == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": None}, "query"),
        ({"query": "q", "scope": ("ops",)}, "scope"),
        ({"query": "q", "filters": ["team"]}, "filters"),
        ({"query": "q", "override_budget": 0}, "override_budget"),
        ({"query": "q", "override_budget": True}, "override_budget"),
        ({"query": "q", "override_budget": "800"}, "override_budget"),
    ],
)
def test_bad_arguments_name_the_field_and_record_nothing(
    retriever, lessons, make_engine, new_metrics, kwargs, field
) -> None:
    metrics = new_metrics()
    engine = make_engine(retriever, lessons, metrics=metrics.sink)
    kwargs = dict(kwargs)  # the parameter is shared by both engines' runs
    query = kwargs.pop("query")
    with pytest.raises(ValidationError) as caught:
        engine.run(query, **kwargs)
    assert caught.value.field == field
    assert metrics.rows() == [] and retriever.calls == 0


def test_run_multi_refuses_a_bad_global_budget(retriever, lessons, make_engine) -> None:
    with pytest.raises(ValidationError) as caught:
        make_engine(retriever, lessons).run_multi(["a"], 0)
    assert caught.value.field == "global_budget"


@pytest.mark.parametrize(
    "entry",
    ["not json", "[" * 100_000 + "]" * 100_000, '{"v": ' + "9" * 5000 + "}"],
    ids=["not json", "nested 100,000 deep", "an integer of 5,000 digits"],
)
def test_an_undecodable_cache_entry_is_a_miss(retriever, lessons, make_engine, entry) -> None:
    cache = MemoryContextCache()
    engine = make_engine(retriever, lessons, cache=cache)
    first = engine.run("What is the refund window?")
    key = engine.pipeline.cache_key("What is the refund window?", Scope(), None, None)
    cache.put(key, entry)
    again = engine.run("What is the refund window?")
    assert again.cache_hit is False and again.context == first.context


def test_the_async_engine_refuses_blocking_backends_and_a_bad_concurrency() -> None:
    import fakeredis

    from contextstore.backends.redis.cache import RedisContextCache
    from contextstore.backends.redis.windows import RedisWindows
    from contextstore.errors import ConfigurationError

    client = fakeredis.FakeStrictRedis()
    with pytest.raises(ConfigurationError, match=r"^cache: RedisContextCache blocks"):
        AsyncContextEngine(cache=RedisContextCache(client))
    with pytest.raises(ConfigurationError, match=r"^windows: RedisWindows blocks"):
        AsyncContextEngine(windows=RedisWindows(client))
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValidationError) as caught:
            AsyncContextEngine(concurrency=bad)  # type: ignore[arg-type]
        assert caught.value.field == "concurrency"
