"""Tracing: one span tree per run, its phases in order, on both engines and on a store's
real backends; off by default, and then OpenTelemetry is not even imported."""

from __future__ import annotations

import ast
import asyncio
import itertools
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextstore.config import ContextEngineConfig, TracingConfig
from contextstore.core.lessons import InMemoryLessons, LessonRecord
from contextstore.core.matching import Scope
from contextstore.core.metrics import MemoryMetrics
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.pipeline import ContextResult
from contextstore.engine.sync import ContextEngine
from contextstore.engine.tracing import PHASES, RUN_SPAN
from contextstore.store.aio import connect_async
from contextstore.store.sync import connect
from tests.backends.redis import drop_namespace
from tests.tracing import children, named

QUERY = "How do I fail over the Postgres replica safely?"
MISS = list(PHASES)
HIT = ["cache read", "lessons", "write"]
TRACED = ContextEngineConfig(tracing=TracingConfig(enabled=True), namespace="traced")


def parts() -> dict[str, object]:
    retriever = InMemoryRetriever()
    retriever.add(
        "Postgres failover: confirm replica lag below five seconds before promoting a replica.",
        "runbook/postgres-failover",
    )
    retriever.add("Refunds are granted within 30 days for annual plans.", "policy/refunds")
    lessons = InMemoryLessons(
        [
            LessonRecord(
                entity_id=f"nw.lessons.ops.db.failover.000{n}",
                injection_form=f"Never promote a lagging replica ({n}).",
                severity="warning",
                status="active",
                applies_to=("tag:ops",),
                created_at=datetime(2026, 5, 1, tzinfo=UTC),
            )
            for n in (1, 2)
        ]
    )
    return {"retriever": retriever, "lessons": lessons, "metrics": MemoryMetrics()}


def tree(finished: tuple[ReadableSpan, ...], run: ReadableSpan) -> list[str]:
    return [span.name for span in children(finished, run)]


def check_run_span(run: ReadableSpan, result: ContextResult, namespace: str) -> None:
    assert run.parent is None
    assert dict(run.attributes or {}) == {
        "contextstore.namespace": namespace,
        "contextstore.cache_hit": result.cache_hit,
        "contextstore.complexity": result.query_analysis.complexity.value,
        "contextstore.intent": result.query_analysis.intent.value,
        "contextstore.budget": result.budget,
        "contextstore.context_length": result.context_length,
        "contextstore.guard_passed": result.guard_passed,
        "contextstore.lessons.matched": 2,
        "contextstore.lessons.included": 2,
    }


def no_query_text(finished: tuple[ReadableSpan, ...]) -> None:
    values = [str(value) for span in finished for value in (span.attributes or {}).values()]
    assert not any("fail over" in value for value in values)


def test_a_sync_run_is_one_tree_with_its_phases_in_order(spans: InMemorySpanExporter) -> None:
    engine = ContextEngine(TRACED, **parts())  # type: ignore[arg-type]
    scope = Scope(tags=("ops",))
    miss = engine.run(QUERY, scope=scope)
    hit = engine.run(QUERY, scope=scope)
    finished = spans.get_finished_spans()
    runs = named(finished, RUN_SPAN)
    assert len(runs) == 2 and len(finished) == 2 + len(MISS) + len(HIT)
    assert (miss.cache_hit, hit.cache_hit) == (False, True)
    assert tree(finished, runs[0]) == MISS
    assert tree(finished, runs[1]) == HIT
    check_run_span(runs[0], miss, "traced")
    check_run_span(runs[1], hit, "traced")
    # Each phase lies within its run, one after the other.
    phases = children(finished, runs[0])
    assert all(a.end_time <= b.start_time for a, b in itertools.pairwise(phases))  # type: ignore[operator]
    assert runs[0].start_time <= phases[0].start_time  # type: ignore[operator]
    assert phases[-1].end_time <= runs[0].end_time  # type: ignore[operator]
    lessons = children(finished, runs[0])[1]
    assert lessons.attributes == {"contextstore.lessons.candidates": 2}
    no_query_text(finished)


def test_concurrent_async_runs_make_one_tree_each(spans: InMemorySpanExporter) -> None:
    async def scenario() -> list[ContextResult]:
        engine = AsyncContextEngine(TRACED, concurrency=3, **parts())  # type: ignore[arg-type]
        queries = [f"{QUERY} ({n})" for n in range(3)]
        return list(
            await asyncio.gather(*(engine.run(q, scope=Scope(tags=("ops",))) for q in queries))
        )

    results = asyncio.run(scenario())
    finished = spans.get_finished_spans()
    runs = named(finished, RUN_SPAN)
    assert len(runs) == 3 and len(finished) == 3 * (1 + len(MISS))
    assert {run.context.trace_id for run in runs if run.context} != set()
    assert len({run.context.trace_id for run in runs if run.context}) == 3
    for run in runs:
        assert tree(finished, run) == MISS
        assert all(
            span.context.trace_id == run.context.trace_id  # type: ignore[union-attr]
            for span in children(finished, run)
        )
    assert sorted(run.attributes["contextstore.cache_hit"] for run in runs) == [False] * 3  # type: ignore[index]
    assert [r.cache_hit for r in results] == [False] * 3
    no_query_text(finished)


def test_the_query_text_is_on_the_span_only_when_asked_for(spans: InMemorySpanExporter) -> None:
    config = ContextEngineConfig(tracing=TracingConfig(enabled=True, query_text=True))
    ContextEngine(config, **parts()).run(QUERY)  # type: ignore[arg-type]
    (run,) = named(spans.get_finished_spans(), RUN_SPAN)
    assert run.attributes is not None and run.attributes["contextstore.query"] == QUERY


def test_a_refused_run_makes_no_span_and_a_failing_one_records_its_error(
    spans: InMemorySpanExporter,
) -> None:
    engine = ContextEngine(TRACED, **parts())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="override_budget"):
        engine.run(QUERY, override_budget=0)
    assert spans.get_finished_spans() == ()

    class Broken(InMemoryRetriever):
        def retrieve(self, *args: object, **kwargs: object) -> list:  # type: ignore[type-arg]
            raise RuntimeError("index gone")

    broken = ContextEngine(TRACED, retriever=Broken())
    with pytest.raises(RuntimeError, match="index gone"):
        broken.run(QUERY)
    finished = spans.get_finished_spans()
    (run,) = named(finished, RUN_SPAN)
    assert tree(finished, run) == ["cache read", "lessons", "retrieval"]
    assert [span.status.status_code.name for span in (run, *children(finished, run))] == [
        "ERROR",
        "UNSET",
        "UNSET",
        "ERROR",
    ]


@pytest.mark.parametrize(
    "backend",
    ["sqlite", pytest.param("postgres+redis", marks=[pytest.mark.postgres, pytest.mark.redis])],
)
def test_a_store_s_engines_trace_their_fused_phases(
    spans: InMemorySpanExporter,
    request: pytest.FixtureRequest,
    backend: str,
    tmp_path: Path,
    namespace: str,
) -> None:
    if backend == "sqlite":
        urls = {"database_url": f"sqlite:///{tmp_path / 'traced.db'}", "redis_url": ""}
    else:
        urls = {
            "database_url": request.getfixturevalue("postgres_server_url"),
            "redis_url": request.getfixturevalue("redis_url"),
        }
    config = ContextEngineConfig(tracing=TracingConfig(enabled=True), namespace=namespace)
    with connect(**urls, config=config) as store:
        store.knowledge.add("Postgres failover: confirm replica lag first.", "failover")
        engine = store.engine()
        results = [engine.run(QUERY), engine.run(QUERY)]

    async def twice() -> list[ContextResult]:
        async with connect_async(**urls, config=config) as store:
            engine = store.engine()
            return [await engine.run(QUERY + "?"), await engine.run(QUERY + "?")]

    results += asyncio.run(twice())
    finished = spans.get_finished_spans()
    runs = named(finished, RUN_SPAN)
    assert [r.cache_hit for r in results] == [False, True, False, True]
    assert [tree(finished, run) for run in runs] == [MISS, HIT, MISS, HIT]
    assert {run.attributes["contextstore.namespace"] for run in runs} == {namespace}  # type: ignore[index]
    if backend != "sqlite":
        client = redis.Redis.from_url(urls["redis_url"])
        drop_namespace(client, namespace)
        client.close()


def test_off_the_engines_need_no_opentelemetry_and_on_they_name_the_extra(
    tmp_path: Path,
) -> None:
    """With OpenTelemetry impossible to import, engines run (tracing off); an engine with
    tracing on is refused at construction, naming the extra that brings it."""
    url = f"sqlite:///{tmp_path / 'off.db'}"
    script = (
        "import sys, asyncio\n"
        "sys.modules['opentelemetry'] = None  # any import of it fails\n"
        "from contextstore import connect, connect_async, ContextEngine\n"
        "from contextstore.config import ContextEngineConfig, TracingConfig\n"
        f"with connect(database_url={url!r}, redis_url='') as store:\n"
        "    print(store.engine().run('how do I fail over?').cache_hit)\n"
        "async def main():\n"
        f"    async with connect_async(database_url={url!r}, redis_url='') as store:\n"
        "        print((await store.engine().run('how do I fail over?')).cache_hit)\n"
        "asyncio.run(main())\n"
        "try:\n"
        "    ContextEngine(ContextEngineConfig(tracing=TracingConfig(enabled=True)))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == [
        "False",
        "False",
        "MissingExtraError tracing (engine.tracing.enabled) needs OpenTelemetry, which is not "
        "installed: pip install 'contextstore[otel]'",
    ]


TRACING_MODULES = {"contextstore/engine/tracing.py", "contextstore/interfaces/web/tracing.py"}


def test_only_the_two_tracing_adapters_import_opentelemetry_and_only_when_built() -> None:
    """The core and everything else never name OpenTelemetry; the two adapters import it
    inside a function (or for type checking), so importing them costs nothing."""
    root = Path(__file__).resolve().parents[2]
    importers: dict[str, list[int]] = {}
    for path in sorted((root / "contextstore").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = set()
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                top_level.add(id(node))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name.split(".")[0] == "opentelemetry" for name in names):
                key = str(path.relative_to(root))
                importers.setdefault(key, []).append(id(node) in top_level)  # type: ignore[arg-type]
    assert set(importers) == TRACING_MODULES
    assert not any(any(flags) for flags in importers.values())
