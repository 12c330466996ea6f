"""The engine ports' contract: every implementation answers the same runs alike.

``assert_same_runs`` drives several engines through ``STEPS``, one run at a time in turn,
each engine on backends of its own (or on the same read-only data), and asserts that every
engine returned exactly what the first one (the plain ports) returned: each ``ContextResult``
(cache hit, context, lessons, chunks, budget, timings from a ticking timer), the windows'
summary, and the metrics rows when the test reads them back. ``STEPS`` repeats queries
(misses, then hits), runs an empty scope, filters and an override budget, and changes the
stored data halfway (``CHANGE``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from contextstore.backends.windows import WindowSummary
from contextstore.core.matching import Scope
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.pipeline import ContextResult
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import load_demo_queries


@dataclass(frozen=True)
class Run:
    query: str
    scope: Scope
    filters: Mapping[str, Any] | None = None
    override_budget: int | None = None


CHANGE: Final = "change"
Step = Run | str

_DEMO = load_demo_queries()
_FIRST = [Run(item.query, item.scope, item.filters) for item in _DEMO[:10]]
_AGAIN = _FIRST[:6]
STEPS: Final[tuple[Step, ...]] = (
    *(run for run in _FIRST for _ in range(2)),  # a miss, then a hit
    Run("which lessons apply without a scope?", Scope()),
    Run(_FIRST[0].query, _FIRST[0].scope, override_budget=300),
    CHANGE,
    *(run for run in _AGAIN for _ in range(2)),
)
RUNS: Final = sum(isinstance(step, Run) for step in STEPS)
FIRST_AFTER_CHANGE: Final = STEPS.index(CHANGE)  # the index, among runs, of the first one
NOW: Final = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def ticking() -> Callable[[], float]:
    """A timer that moves 4 ms each time it is read: the same timings for every engine."""
    counter = itertools.count()
    return lambda: next(counter) * 0.004


def fixed_now() -> datetime:
    return NOW


def engine_options() -> dict[str, Any]:
    """The keyword arguments that make two engines' runs comparable to the bit."""
    return {"timer": ticking(), "now": fixed_now, "worker": "contract"}


@dataclass
class Driven:
    """One engine under test, driven from a sync test body."""

    name: str
    run: Callable[[Run], ContextResult]
    summary: Callable[[], WindowSummary]
    rows: Callable[[], Sequence[object]] | None = None


def driven(
    name: str, engine: ContextEngine, rows: Callable[[], Sequence[object]] | None = None
) -> Driven:
    return Driven(
        name,
        lambda run: engine.run(
            run.query, scope=run.scope, filters=run.filters, override_budget=run.override_budget
        ),
        engine.adaptive.windows.summary,
        rows,
    )


def adriven(
    name: str,
    engine: AsyncContextEngine,
    runner: asyncio.Runner,
    rows: Callable[[], Sequence[object]] | None = None,
) -> Driven:
    def run(step: Run) -> ContextResult:
        return runner.run(
            engine.run(
                step.query,
                scope=step.scope,
                filters=step.filters,
                override_budget=step.override_budget,
            )
        )

    return Driven(name, run, lambda: runner.run(engine.windows.summary()), rows)


def assert_same_runs(engines: Sequence[Driven], change: Callable[[], None]) -> list[ContextResult]:
    """Every engine answers ``STEPS`` exactly as ``engines[0]``; that one's results."""
    seen: dict[str, list[ContextResult]] = {engine.name: [] for engine in engines}
    for step in STEPS:
        if isinstance(step, str):
            change()
            continue
        for engine in engines:
            seen[engine.name].append(engine.run(step))
    reference, *others = engines
    expected = seen[reference.name]
    for other in others:
        for index, (mine, theirs) in enumerate(zip(seen[other.name], expected, strict=True)):
            assert mine == theirs, f"{other.name}, run {index}: {brief(mine)} != {brief(theirs)}"
        assert other.summary() == reference.summary(), other.name
        if other.rows is not None and reference.rows is not None:
            assert other.rows() == reference.rows(), other.name
    assert reference.summary().total_queries == RUNS
    hits = [result.cache_hit for result in expected]
    assert hits.count(True) >= 8 and hits.count(False) >= 10  # both paths were compared
    assert any(result.lessons.included for result in expected)
    assert any(result.chunks_used for result in expected)
    return expected


def brief(result: ContextResult) -> tuple[object, ...]:
    """What a failed comparison prints: hit, budget, lengths, lessons, chunk sources."""
    return (
        result.cache_hit,
        result.budget,
        result.context_length,
        result.pipeline_ms,
        tuple(lesson.entity_id for lesson in result.lessons.included),
        tuple(chunk.source for chunk in result.chunks_used),
    )
