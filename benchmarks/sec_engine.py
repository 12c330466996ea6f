"""``ContextEngine.run()`` end to end: latency of both paths, and round trips per run.

Baselines, measured in the same loop: the same pipeline with no storage at all (no lessons,
no metrics, no cache) for the miss path, and an in-process memory-cache hit for the hit
path, each followed by the four raw round trips a run physically needs, made with the raw
clients (PostgreSQL + Redis: a Redis GET, a SQL SELECT, a Redis SET PX and a committed SQL
INSERT; SQLite + memory: the SELECT and the committed INSERT, in process). The ratio is what
contextstore costs on top of the computation and the unavoidable I/O. The write phase (cache
store + sample + metrics row, after ``pipeline_ms`` ends) is reported on its own.

Round trips are counted on the wire for PostgreSQL + Redis (``benchmarks.wire.RoundTripProxy``:
what a network charges, BEGIN and COMMIT included) in a separate pass, and as SQLAlchemy
statements for SQLite; they are compared between a store holding only the sample lessons and
one holding the synthetic lessons as well: they must not grow.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import redis as redis_lib
import sqlalchemy as sa

from benchmarks.context import Bench
from benchmarks.demo_knowledge import demo_retriever
from benchmarks.report import Row, ms
from benchmarks.services import SqlCounter
from benchmarks.timing import percentile, timed_call_ms
from benchmarks.wire import RoundTripProxy
from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.redis.cache import MAGIC
from contextstore.backends.sql.repository import candidate_sql, keys_parameter
from contextstore.config import CacheConfig
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.lessons import InMemoryLessons
from contextstore.core.matching import Scope, lookup_keys
from contextstore.engine.pipeline import Composition
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import load_demo_queries, load_lessons
from contextstore.store.sync import connect

LABELS = {"embedded": "SQLite + memory", "shared": "PostgreSQL + Redis"}


@dataclass
class PathFigures:
    ms: list[float] = field(default_factory=list)
    write_ms: list[float] = field(default_factory=list)  # the write phase: after pipeline_ms
    trips: list[tuple[int, int]] = field(default_factory=list)  # SQL, Redis

    def trip_text(self) -> str:
        sql, redis = (statistics.median(t[i] for t in self.trips) for i in range(2))
        text = f"SQL {sql:g}"
        return text + (f", Redis {redis:g}" if any(t[1] for t in self.trips) else "")

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


class RawTrips:
    """The four round trips a run physically needs, made with the raw clients, moving what a
    run moves: a Redis GET of an entry as large as the run's, the run's own lesson-candidate
    SELECT (same text, same scope keys, same rows), a Redis SET PX of that entry, and a
    committed INSERT of the run's own metrics row into ``query_metrics`` (same columns, same
    values, same indexes). SQLite + memory: the two SQL ones, in process. One DBAPI
    connection in autocommit, one redis-py client."""

    def __init__(self, store: Any, redis_url: str) -> None:
        self.dialect = store.sql_engine.dialect.name
        self.connection = store.sql_engine.raw_connection()
        marker = "%s" if self.dialect == "postgresql" else "?"
        self.select = candidate_sql(self.dialect).replace(":keys", marker)
        self.marker = marker
        if self.dialect == "postgresql":
            self.connection.driver_connection.autocommit = True  # type: ignore[union-attr]
        self.redis = redis_lib.Redis.from_url(redis_url) if redis_url else None
        self.key = f"cs-bench-raw:{store.namespace}"
        self.namespace = f"{store.namespace}-raw"
        self.insert = ""
        self.row: tuple[Any, ...] = ()
        self.entry = b""
        self.keys: Any = None

    def follow(self, store: Any, result: Any, scope: Scope) -> None:
        """Take the payloads of the run that produced ``result``: its cache entry, its
        metrics row (the store's last one) and its scope keys."""
        composition = Composition(
            result.budget,
            result.context,
            result.chunks_used,
            result.totals,
            result.guard_warnings,
            None,
        )
        self.entry = MAGIC + composition.encode().encode("utf-8")
        self.keys = keys_parameter(self.dialect, sorted(lookup_keys(scope)))
        cursor = self.connection.cursor()
        cursor.execute("SELECT * FROM query_metrics ORDER BY id DESC LIMIT 1")
        names = [column[0] for column in cursor.description if column[0] != "id"]
        row = dict(zip([c[0] for c in cursor.description], cursor.fetchone(), strict=True))
        row["namespace"] = self.namespace
        self.row = tuple(_raw_value(row[name]) for name in names)
        self.insert = (
            f"INSERT INTO query_metrics ({', '.join(names)}) "
            f"VALUES ({', '.join([self.marker] * len(names))})"
        )
        if self.dialect != "postgresql":
            self.connection.commit()

    def __call__(self) -> None:
        cursor = self.connection.cursor()
        if self.redis is not None:
            self.redis.get(self.key)
        cursor.execute(self.select, (self.keys,))
        cursor.fetchall()
        if self.redis is not None:
            self.redis.set(self.key, self.entry, px=300_000)
        cursor.execute(self.insert, self.row)
        if self.dialect != "postgresql":
            self.connection.commit()

    def close(self) -> None:
        cursor = self.connection.cursor()
        delete = f"DELETE FROM query_metrics WHERE namespace = {self.marker}"
        cursor.execute(delete, (self.namespace,))
        if self.dialect != "postgresql":
            self.connection.commit()
        if self.redis is not None:
            self.redis.delete(self.key)
            self.redis.close()
        self.connection.close()


def _raw_value(value: Any) -> Any:
    """A value read back from ``query_metrics`` as the DBAPI takes it again (JSON as text)."""
    if isinstance(value, list | dict):
        return json.dumps(value)
    return value


class Subject:
    """One store (database + cache + windows) with its engine, baselines and counters."""

    def __init__(self, bench: Bench, backend: str, database_url: str, lessons: int) -> None:
        redis_url = bench.services.redis_url if backend == "shared" else ""
        namespace = bench.services.namespace(f"engine-{backend}-{lessons}")
        self.store = connect(database_url, redis_url, namespace)
        self.store.lessons.import_records(load_lessons())
        embed = HashingEmbedder()
        retriever = demo_retriever()  # the demo's documents, searched as the demo searches
        self.engine = self.store.engine(retriever=retriever, embed_fn=embed, worker="bench")
        # The baselines do the same pure work: the same retriever, the same lessons to match
        # (held in memory), the same guard and adaptive rules; only the storage is missing.
        held = InMemoryLessons(load_lessons())
        self.bare = ContextEngine(
            replace(self.store.config, cache=CacheConfig(enabled=False)),
            retriever=retriever,
            lessons=held,
            embed_fn=embed,
            windows=MemoryWindows(),
        )
        self.cached = ContextEngine(
            self.store.config, retriever=retriever, lessons=held, embed_fn=embed
        )
        self.raw = RawTrips(self.store, redis_url)
        first = load_demo_queries()[0]
        self.raw.follow(self.store, self.engine.run(first.query, scope=first.scope), first.scope)
        # PostgreSQL + Redis: a second store on the same data, reached through counting
        # proxies, so the timed runs pay no proxy and the counted ones are exact.
        self.proxies: tuple[RoundTripProxy, RoundTripProxy] | None = None
        self.sql = SqlCounter()
        if backend != "shared":
            # SQLite: the statements of a second store on the same file are counted, so the
            # timed engine pays for no listener.
            self.counted_store = connect(database_url, redis_url, namespace)
            self.sql.attach(self.counted_store.sql_engine)
            self.counted = self.counted_store.engine(
                retriever=retriever, embed_fn=embed, worker="bench-counted"
            )
        else:
            url = sa.make_url(database_url)
            target = urlsplit(redis_url)
            pg = RoundTripProxy(url.host or "127.0.0.1", url.port or 5432)
            rd = RoundTripProxy(target.hostname or "127.0.0.1", target.port or 6379)
            self.proxies = (pg, rd)
            proxied = url.set(host="127.0.0.1", port=pg.port).render_as_string(hide_password=False)
            self.counted_store = connect(
                proxied, f"redis://127.0.0.1:{rd.port}{target.path}", namespace
            )
            self.counted = self.counted_store.engine(
                retriever=retriever, embed_fn=embed, worker="bench-counted"
            )
        self.figures = Measured(lessons)

    def counts(self) -> tuple[int, int]:
        """(SQL round trips, Redis round trips) so far: on the wire, or SQLite statements."""
        if self.proxies is not None:
            return self.proxies[0].round_trips, self.proxies[1].round_trips
        return self.sql.statements, 0

    def timed(self, query: str, scope: Scope, filters: Any) -> tuple[float, float, bool]:
        """(ms, write-phase ms, cache hit) of one run of the measured engine; the baseline
        then moves the same payloads as this run."""
        result: list[Any] = []
        took = timed_call_ms(
            lambda: result.append(self.engine.run(query, scope=scope, filters=filters))
        )
        self.raw.follow(self.store, result[0], scope)
        return took, took - result[0].pipeline_ms, bool(result[0].cache_hit)

    def trips(self, query: str, scope: Scope, filters: Any) -> list[tuple[Trips, bool]]:
        """Round trips of a miss, then a hit, of ``query`` on the counted engine."""
        found = []
        for _ in range(2):
            before = self.counts()
            hit = self.counted.run(query, scope=scope, filters=filters).cache_hit
            after = self.counts()
            found.append(((after[0] - before[0], after[1] - before[1]), hit))
        return found

    def iteration(self, query: str, scope: Scope, filters: Any, measured: bool, flip: bool) -> None:
        """Run ``query`` twice (miss, then hit) on the engine and once each on the baselines."""
        if flip:  # alternate which engine goes first
            base = _baseline(self.bare, self.cached, self.raw, query, scope, filters)
        first_ms, first_write, first_hit = self.timed(query, scope, filters)
        second_ms, second_write, second_hit = self.timed(query, scope, filters)
        if not flip:
            base = _baseline(self.bare, self.cached, self.raw, query, scope, filters)
        counted = self.trips(f"{query} (counted)", scope, filters)
        if not measured:
            return
        figures = self.figures
        figures.iterations += 1
        figures.base_miss.append(base[0])
        figures.base_hit.append(base[1])
        if not first_hit:
            figures.miss.ms.append(first_ms)
            figures.miss.write_ms.append(first_write)
        if not first_hit and second_hit:
            figures.hits_seen += 1
            figures.hit.ms.append(second_ms)
            figures.hit.write_ms.append(second_write)
        (miss_trips, miss_hit), (hit_trips, hit_hit) = counted
        if not miss_hit:
            figures.miss.trips.append(miss_trips)
        if not miss_hit and hit_hit:
            figures.hit.trips.append(hit_trips)

    def close(self) -> None:
        self.raw.close()
        self.store.close()
        self.counted_store.close()
        if self.proxies is not None:
            for proxy in self.proxies:
                proxy.close()


Trips = tuple[int, int]


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
            subject.close()


def _baseline(
    bare: ContextEngine,
    cached: ContextEngine,
    raw: RawTrips,
    query: str,
    scope: Scope,
    filters: Any,
) -> tuple[float, float]:
    """(miss ms, hit ms) of the same pipeline without storage plus the four raw round trips."""

    def miss() -> None:
        bare.run(query, scope=scope, filters=filters)
        raw()

    def hit() -> None:
        cached.run(query, scope=scope, filters=filters)
        raw()

    took_miss = timed_call_ms(miss)
    cached.run(query, scope=scope, filters=filters)  # fills the baseline's memory cache
    took_hit = timed_call_ms(hit)
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
    trips = "4 raw round trips" if backend == "shared" else "2 raw SQL statements"
    for path, ours, base, base_name, target in (
        ("cache miss", small.miss.ms, small.base_miss, f"no-storage pipeline + {trips}", 1.3),
        ("cache hit", small.hit.ms, small.base_hit, f"memory-cache hit + {trips}", 1.5),
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
                    f"≤ {target}×" if label == "p50" else "",
                    mine / theirs <= target if label == "p50" else None,
                    note="ratio: what contextstore adds to the computation and the I/O"
                    if label == "p50" and path == "cache miss"
                    else "",
                    values={"ours_ms": mine, "base_ms": theirs},
                )
            )
    for path, figures in (("cache miss", small.miss), ("cache hit", small.hit)):
        if figures.write_ms and figures.ms:
            write, whole = percentile(figures.write_ms, 0.5), percentile(figures.ms, 0.5)
            rows.append(
                Row(
                    section,
                    f"{path}: write phase p50 (cache store, sample, metrics row)",
                    ms(write),
                    "the whole run, p50",
                    ms(whole),
                    write / whole,
                    note="the part of a run after pipeline_ms ends",
                    values={"write_ms": write, "run_ms": whole},
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
