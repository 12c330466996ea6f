"""``candidates(scope)`` + ``match()`` against hand-written SQL and a full scan, at two sizes."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from benchmarks import workload
from benchmarks.context import Bench
from benchmarks.report import Row, at_least, at_most, ms
from benchmarks.timing import percentile, timed_call_ms
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.matching import MatchOptions, MatchResult, Scope, match

LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


@dataclass(frozen=True)
class Figures:
    lessons: int
    ours: list[float]
    hand: list[float]
    full: list[float]
    matched: float
    mismatches: int

    def p(self, which: str, fraction: float) -> float:
        return percentile(getattr(self, which), fraction)


def library(engine: sa.Engine) -> Callable[[Scope], MatchResult]:
    repository = LessonRepository(engine)

    def run(scope: Scope) -> MatchResult:
        return match(repository.candidates(scope), scope, MatchOptions())

    return run


@dataclass
class Size:
    """One size's database, what is timed on it, and its times so far."""

    lessons: int
    engine: sa.Engine
    scopes: list[Scope]
    ours: Callable[[Scope], MatchResult]
    hand: Callable[[Scope], MatchResult]
    matched: float = 0.0
    mismatches: int = 0
    ours_ms: list[float] = field(default_factory=list)
    hand_ms: list[float] = field(default_factory=list)


def measure(bench: Bench, dialect: str, sized: list[tuple[int, sa.Engine]]) -> list[Figures]:
    """The figures of each (lessons, engine): every round times each size's scopes in turn,
    so that a growth ratio compares the same minutes of a shared machine."""
    label = LABELS[dialect]
    sizes = [
        Size(n, engine, workload.scopes(n, bench.pick(10, 20)), library(engine),
             workload.hand_written(engine))
        for n, engine in sized
    ]  # fmt: skip
    for size in sizes:
        bench.say(f"{label} {size.lessons:,} lessons: checking both give the same answer")
        # Doubles as a warm-up.
        size.mismatches = sum(size.ours(scope) != size.hand(scope) for scope in size.scopes)
        size.matched = statistics.mean(size.hand(scope).matched_count for scope in size.scopes)
    rounds = bench.pick(3, 5)
    for round_number in range(rounds):
        bench.say(f"{label} lessons: round {round_number + 1}/{rounds}")
        for size in sizes:
            for index, scope in enumerate(size.scopes):
                pair = [(size.ours, size.ours_ms), (size.hand, size.hand_ms)]
                if (round_number + index) % 2:
                    pair.reverse()
                for function, out in pair:
                    out.append(timed_call_ms(lambda f=function, s=scope: f(s)))  # type: ignore[misc]
    figures = []
    for size in sizes:
        bench.say(f"{label} {size.lessons:,} lessons: full-scan baseline")
        full = workload.full_scan(size.engine)
        full_ms = [timed_call_ms(lambda s=scope, f=full: f(s)) for scope in size.scopes[:3]]  # type: ignore[misc]
        figures.append(
            Figures(
                size.lessons, size.ours_ms, size.hand_ms, full_ms, size.matched, size.mismatches
            )
        )
    return figures


def run(bench: Bench, dialect: str) -> list[Row]:
    if dialect == "postgresql":
        bench.services.require_postgres()
    small, large = bench.lesson_sizes
    bench.notes.append(
        "Lessons on SQLite are measured without planner statistics, as contextstore leaves a "
        "database (nothing runs ANALYZE); the baseline statement pins its join order with "
        "CROSS JOIN so it does not depend on them."
        if dialect == "sqlite"
        else "Lessons on PostgreSQL are measured after VACUUM ANALYZE (what autovacuum does "
        "after a load); psycopg prepares a statement run 5 times, so later runs may use a "
        "generic plan."
    )
    # The small size in a database of its own, so both sizes are timed in the same minutes
    # (the shared lesson database grows in place to the large size, which other sections use).
    bench.say(f"{LABELS[dialect]}: bulk-loading {small:,} lessons")
    small_engine = bench.services.engine(bench.services.database_url(dialect, "lessons-small"))
    workload.bulk_load(small_engine, 0, small)
    _, large_engine, _ = bench.lesson_database(dialect, large)
    first, second = measure(bench, dialect, [(small, small_engine), (large, large_engine)])
    section = f"Lessons, {LABELS[dialect]}"
    rows: list[Row] = []
    for figures in (first, second):
        size = f"{figures.lessons // 1000:,}k lessons"
        for label, fraction in (("p50", 0.5), ("p95", 0.95)):
            ours, hand = figures.p("ours", fraction), figures.p("hand", fraction)
            target, met = at_most(ours / hand, 1.25)
            note = f"~{figures.matched:.0f} lessons match each scope"
            if figures.mismatches:
                note += f"; **{figures.mismatches} scopes gave a different answer**"
                met = False
            rows.append(
                Row(
                    section,
                    f"candidates() + match(), {size}, {label}",
                    ms(ours),
                    "one hand-written SELECT … JOIN + match()",
                    ms(hand),
                    ours / hand,
                    target,
                    met,
                    note=note if label == "p50" else "",
                    values={"ours_ms": ours, "base_ms": hand, "lessons": figures.lessons},
                )
            )
        ours50, full50 = figures.p("ours", 0.5), statistics.median(figures.full)
        hand50 = figures.p("hand", 0.5)
        target, met = at_least(full50 / ours50, 50)
        rows.append(
            Row(
                section,
                f"candidates() + match(), {size}, p50 — speed-up over a full scan",
                ms(ours50),
                "load every active lesson, match in Python",
                ms(full50),
                full50 / ours50,
                target,
                met,
                # What an index can win at most here: the hand-written statement's own gain.
                note=f"the hand-written statement: {full50 / hand50:.0f}×",
                values={"ours_ms": ours50, "base_ms": full50, "lessons": figures.lessons},
            )
        )
    for label, fraction in (("p50", 0.5), ("p95", 0.95)):
        grown, base = second.p("ours", fraction), first.p("ours", fraction)
        target, met = at_most(grown / base, 1.5)
        rows.append(
            Row(
                section,
                f"growth {small // 1000}k → {large // 1000}k lessons, {label}",
                ms(grown),
                f"same scopes at {small // 1000}k",
                ms(base),
                grown / base,
                target,
                met,
                values={"ours_ms": grown, "base_ms": base},
            )
        )
    return rows
