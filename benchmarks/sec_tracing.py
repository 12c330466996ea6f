"""What tracing costs a run: off (the default), on without an SDK, and on with the SDK.

Every figure is ``ContextEngine.run()`` over the demo queries on in-process parts (the
sample corpus, the sample lessons, no cache, so every run goes through all six phases and
the run's own computation is all there is to compare against). The baseline, measured in
the same rounds, is the pipeline driven with no tracing code at all:
``drive(engine.pipeline.run(...), engine._perform)``, which is what ``run()`` did before
tracing existed. Rounds alternate which goes first, and the medians are compared.

- **off**: ``run()`` of an engine built with ``engine.tracing.enabled = false``: one test
  of ``None`` per run; the target is to be within noise of the baseline.
- **on, API only**: tracing on with no SDK installed as the tracer provider: the
  OpenTelemetry API's non-recording spans.
- **on, SDK**: the SDK's tracer provider with a span processor handing each finished span
  to an exporter that drops it: the cost of making and ending seven spans per run.

The SDK's provider is installed last and stays the process's provider: sections that run
after this one in the same process would make spans through it (none of them enables
tracing, so none does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.context import Bench
from benchmarks.demo_knowledge import demo_retriever
from benchmarks.report import Row, at_most, ms
from benchmarks.timing import Comparison, compare
from contextstore.config import CacheConfig, ContextEngineConfig, TracingConfig
from contextstore.core.lessons import InMemoryLessons
from contextstore.engine.pipeline import drive
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import load_demo_queries, load_lessons

SECTION = "Tracing"


def _engine(tracing: bool) -> ContextEngine:
    config = ContextEngineConfig(
        cache=CacheConfig(enabled=False), tracing=TracingConfig(enabled=tracing)
    )
    return ContextEngine(
        config, retriever=demo_retriever(), lessons=InMemoryLessons(load_lessons())
    )


def _runs(engine: ContextEngine, work: Sequence[tuple[str, Any]]) -> Callable[[], None]:
    def batch() -> None:
        for query, scope in work:
            engine.run(query, scope=scope)

    return batch


def _untraced(engine: ContextEngine, work: Sequence[tuple[str, Any]]) -> Callable[[], None]:
    pipeline, perform = engine.pipeline, engine._perform

    def batch() -> None:
        for query, scope in work:
            drive(pipeline.run(query, scope, None, None), perform)

    return batch


def _row(name: str, result: Comparison, runs: int, target: float | None, note: str) -> Row:
    ours_ms = 1000 / result.ours_ops_per_s
    base_ms = 1000 / result.base_ops_per_s
    time_ratio = 1 / result.ratio
    goal, met = at_most(time_ratio, target) if target is not None else ("", None)
    return Row(
        SECTION,
        name,
        ms(ours_ms),
        "no tracing code",
        ms(base_ms),
        round(time_ratio, 3),
        goal,
        met,
        note,
        values={
            "ours_ms": ours_ms,
            "baseline_ms": base_ms,
            "runs_per_batch": runs,
            "rounds": len(result.ours_ns),
        },
    )


def run(bench: Bench) -> list[Row]:
    queries = load_demo_queries()
    repeat = bench.pick(2, 6)
    work = [(query.query, query.scope) for query in queries] * repeat
    rounds = bench.pick(9, 21)
    rows: list[Row] = []

    bench.say("tracing: off against no tracing code")
    plain = _engine(tracing=False)
    off = compare(_runs(plain, work), _untraced(plain, work), ops=len(work), rounds=rounds)
    rows.append(_row("run(), tracing off", off, len(work), 1.03, "the default: within noise"))

    bench.say("tracing: on, the API without an SDK")
    from opentelemetry import trace

    traced = _engine(tracing=True)
    api = compare(_runs(traced, work), _untraced(plain, work), ops=len(work), rounds=rounds)
    rows.append(_row("run(), tracing on, API only", api, len(work), None, "non-recording spans"))

    bench.say("tracing: on, the SDK recording every span")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    recorded = _engine(tracing=True)
    sdk = compare(_runs(recorded, work), _untraced(plain, work), ops=len(work), rounds=rounds)
    rows.append(
        _row("run(), tracing on, SDK", sdk, len(work), None, "seven spans per run, recorded")
    )
    return rows
