"""The one result shape's cost: a run's answer written as ``RunJson`` (``run_json``, then
pydantic-core's JSON writer, as ``/v1/run`` does) against the serialisation it replaced, pydantic's
dump of the engine's ``ContextResult`` dataclass, for the same run of the demo's documents."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import TypeAdapter
from pydantic_core import to_json

from benchmarks.context import Bench
from benchmarks.report import Row, rate
from benchmarks.timing import compare
from contextstore import LessonRecord, Scope, connect
from contextstore.engine.pipeline import ContextResult
from contextstore.interfaces.results import run_json
from contextstore.sample_data import demo_corpus_lines

SECTION = "Result shape"
QUERY = "How do I fail over the primary Postgres cluster?"


def run(bench: Bench) -> list[Row]:
    ops = bench.pick(2_000, 20_000)
    rounds = bench.pick(5, 9)
    with connect(database_url="sqlite://", redis_url="") as store:
        store.knowledge.import_jsonl(demo_corpus_lines())
        store.lessons.add(
            LessonRecord("ops.lag", "Check replica lag first.", "critical", "active", ("tag:ops",))
        )
        result = store.engine().run(QUERY, scope=Scope(tags=("ops",)))
    dataclass = TypeAdapter(ContextResult)

    def batch(write: Callable[[], bytes]) -> Callable[[], None]:
        def loop() -> None:
            for _ in range(ops):
                write()

        return loop

    bench.say("result shape: one run's answer")
    measured = compare(
        batch(lambda: to_json(run_json(result))),
        batch(lambda: dataclass.dump_json(result)),
        ops=ops,
        rounds=rounds,
    )
    ours, before = len(to_json(run_json(result))), len(dataclass.dump_json(result))
    return [
        Row(
            SECTION,
            "a run's answer serialised (/v1/run's body)",
            rate(measured.ours_ops_per_s),
            "ContextResult dumped",
            rate(measured.base_ops_per_s),
            measured.ratio,
            note=f"{ours} bytes against {before}: prompt repeats the lesson block and context",
            values={
                "ours_ops_per_s": measured.ours_ops_per_s,
                "base_ops_per_s": measured.base_ops_per_s,
                "ours_bytes": ours,
                "base_bytes": before,
            },
        )
    ]
