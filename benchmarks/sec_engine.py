"""``ContextEngine.run()`` end to end: latency of both paths, and round trips per run.

Baselines: the same pipeline with no storage at all (no lessons, no metrics, no cache) for
the miss path, and an in-process memory-cache hit without lessons or metrics for the hit
path — the ratio is what the durable, shared parts cost on top of the computation. Round
trips are counted at the drivers (SQLAlchemy ``before_cursor_execute`` plus commits; every
packed send of the Redis client) and compared between a store holding only the sample
lessons and one holding the synthetic lessons as well: they must not grow.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.services import RedisCounter, SqlCounter
from benchmarks.timing import percentile, timed_call_ms
from contextstore.adaptive.memory import MemoryWindows
from contextstore.config import CacheConfig
from contextstore.embedding import HashingEmbedder
from contextstore.engine import ContextEngine
from contextstore.matching import Scope
from contextstore.sample_data import load_demo_queries, load_lessons, sample_retriever
from contextstore.store import connect

LABELS = {"embedded": "SQLite + memory", "shared": "PostgreSQL + Redis"}


@dataclass
class PathFigures:
    ms: list[float] = field(default_factory=list)
    trips: list[tuple[int, int, int]] = field(default_factory=list)  # statements, commits, redis

    def trip_text(self) -> str:
        statements, commits, redis = (statistics.median(t[i] for t in self.trips) for i in range(3))
        text = f"SQL {statements:g} stmts + {commits:g} commits"
        return text + (f", Redis {redis:g}" if any(t[2] for t in self.trips) else "")

    def trip_total(self) -> float:
        return statistics.median(sum(t) for t in self.trips)

    def fixed(self) -> bool:
        return len(set(self.trips)) == 1


@dataclass
class Measured:
    lessons: int
    miss: PathFigures = field(default_factory=PathFigures)
    hit: PathFigures = field(default_factory=PathFigures)
    base_miss: list[float] = field(default_factory=list)
    base_hit: list[float] = field(default_factory=list)
    hits_seen: int = 0
    iterations: int = 0


class Subject:
    """One store (database + cache + windows) with its engine, baselines and counters."""

    def __init__(self, bench: Bench, backend: str, database_url: str, lessons: int) -> None:
        redis_url = bench.services.redis_url if backend == "shared" else ""
        namespace = bench.services.namespace(f"engine-{backend}-{lessons}")
        self.store = connect(database_url, redis_url, namespace)
        self.store.lessons.import_records(load_lessons())
        self.sql = SqlCounter().attach(self.store.sql_engine)
        redis = self.store.redis
        self.redis = RedisCounter().attach(redis) if redis is not None else None
        embed = HashingEmbedder()
        retriever = sample_retriever(embed_fn=embed)
        self.engine = self.store.engine(retriever=retriever, embed_fn=embed, worker="bench")
        self.bare = ContextEngine(
            replace(self.store.config, cache=CacheConfig(enabled=False)),
            retriever=retriever,
            embed_fn=embed,
            windows=MemoryWindows(),
        )
        self.cached = ContextEngine(self.store.config, retriever=retriever, embed_fn=embed)
        self.figures = Measured(lessons)

    def counts(self) -> tuple[int, int, int]:
        return self.sql.statements, self.sql.commits, self.redis.sends if self.redis else 0

    def timed(self, query: str, scope: Scope, filters: Any) -> tuple[float, Trips, bool]:
        """(ms, round trips, cache hit) of one run of the measured engine."""
        before = self.counts()
        result: list[Any] = []
        took = timed_call_ms(
            lambda: result.append(self.engine.run(query, scope=scope, filters=filters))
        )
        after = self.counts()
        trips = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
        return took, trips, bool(result[0].cache_hit)

    def iteration(self, query: str, scope: Scope, filters: Any, measured: bool, flip: bool) -> None:
        """Run ``query`` twice (miss, then hit) on the engine and once each on the baselines."""
        if flip:  # alternate which engine goes first
            base = _baseline(self.bare, self.cached, query, scope, filters)
        first_ms, first_trips, first_hit = self.timed(query, scope, filters)
        second_ms, second_trips, second_hit = self.timed(query, scope, filters)
        if not flip:
            base = _baseline(self.bare, self.cached, query, scope, filters)
        if not measured:
            return
        figures = self.figures
        figures.iterations += 1
        figures.base_miss.append(base[0])
        figures.base_hit.append(base[1])
        if not first_hit:
            figures.miss.ms.append(first_ms)
            figures.miss.trips.append(first_trips)
        if not first_hit and second_hit:
            figures.hits_seen += 1
            figures.hit.ms.append(second_ms)
            figures.hit.trips.append(second_trips)


Trips = tuple[int, int, int]


def _measure(bench: Bench, backend: str, urls: tuple[str, str], synthetic: int) -> list[Measured]:
    """Both stores measured in the same loop, alternating, so drift hits them equally."""
    subjects = [
        Subject(bench, backend, urls[0], 0),
        Subject(bench, backend, urls[1], synthetic),
    ]
    try:
        work = [
            (item.query, Scope(entity_ids=item.entity_ids, tags=item.tags), item.filters)
            for item in load_demo_queries()
        ]
        warmup = 5
        iterations = bench.pick(20, 60)
        for i in range(warmup + iterations):
            if i % 10 == 0:
                bench.say(f"engine, {LABELS[backend]}: iteration {i}/{warmup + iterations}")
            query, scope, filters = work[i % len(work)]
            # A fresh variant per iteration: its first run misses, its second hits.
            variant = f"{query} (v{i})"
            for subject in subjects if i % 2 else subjects[::-1]:
                subject.iteration(variant, scope, filters, i >= warmup, bool(i % 2))
        return [subject.figures for subject in subjects]
    finally:
        for subject in subjects:
            subject.store.close()


def _baseline(
    bare: ContextEngine, cached: ContextEngine, query: str, scope: Scope, filters: Any
) -> tuple[float, float]:
    """(miss ms without storage, memory-cache hit ms without storage) for one query."""
    took_miss = timed_call_ms(lambda: bare.run(query, scope=scope, filters=filters))
    cached.run(query, scope=scope, filters=filters)  # fills the baseline's memory cache
    took_hit = timed_call_ms(lambda: cached.run(query, scope=scope, filters=filters))
    return took_miss, took_hit


def run(bench: Bench, backend: str) -> list[Row]:
    dialect = "postgresql" if backend == "shared" else "sqlite"
    if backend == "shared":
        bench.services.require_postgres()
        bench.services.require_redis()
    bench.say(f"engine, {LABELS[backend]}: preparing databases")
    small_url = bench.services.database_url(dialect, f"engine_{backend}")
    synthetic = bench.loaded_lessons(dialect) or bench.lesson_sizes[0]
    large_url, _, synthetic = bench.lesson_database(dialect, synthetic)
    small, large = _measure(bench, backend, (small_url, large_url), synthetic)
    section = f"Engine run(), {LABELS[backend]}"
    rows: list[Row] = []
    for path, ours, base, base_name in (
        ("cache miss", small.miss.ms, small.base_miss, "same pipeline, no storage"),
        ("cache hit", small.hit.ms, small.base_hit, "in-process memory-cache hit, no storage"),
    ):
        if not ours:
            rows.append(Row(section, f"{path}: no runs of this path", "—", base_name, "", None))
            continue
        for label, fraction in (("p50", 0.5), ("p95", 0.95)):
            mine, theirs = percentile(ours, fraction), percentile(base, fraction)
            rows.append(
                Row(
                    section,
                    f"{path}, {label} (sample lessons)",
                    ms(mine),
                    base_name,
                    ms(theirs),
                    mine / theirs,
                    note="ratio: the cost of lessons, metrics and the shared cache"
                    if label == "p50" and path == "cache miss"
                    else "",
                    values={"ours_ms": mine, "base_ms": theirs},
                )
            )
    grown, base_ms = percentile(large.miss.ms, 0.5), percentile(small.miss.ms, 0.5)
    rows.append(
        Row(
            section,
            f"cache miss p50 with {synthetic:,} more lessons",
            ms(grown),
            "sample lessons only",
            ms(base_ms),
            grown / base_ms,
            values={"ours_ms": grown, "base_ms": base_ms},
        )
    )
    for path in ("miss", "hit"):
        mine_path: PathFigures = getattr(large, path)
        base_path: PathFigures = getattr(small, path)
        if not mine_path.trips or not base_path.trips:
            continue
        same = mine_path.trip_total() == base_path.trip_total()
        fixed = mine_path.fixed() and base_path.fixed()
        rows.append(
            Row(
                section,
                f"round trips per cache-{path} run, {synthetic:,} more lessons",
                mine_path.trip_text(),
                "sample lessons only",
                base_path.trip_text(),
                mine_path.trip_total() / base_path.trip_total(),
                "= 1× (fixed)",
                same and fixed,
                note="" if fixed else "count varied between runs",
                values={
                    "ours_trips": mine_path.trips[:5],
                    "base_trips": base_path.trips[:5],
                },
            )
        )
    if small.hits_seen < small.iterations:
        bench.notes.append(
            f"{LABELS[backend]}: {small.iterations - small.hits_seen} of {small.iterations} "
            "second runs did not hit the cache (the guard failed, so nothing was stored)."
        )
    return rows
