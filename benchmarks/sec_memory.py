"""The in-process cache against ``cachetools.TTLCache``: throughput and bytes per entry."""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import cachetools

from benchmarks.context import Bench
from benchmarks.report import Row, at_least, rate
from benchmarks.timing import compare
from contextstore.backends.cache import make_key
from contextstore.backends.memory.cache import MemoryContextCache

SECTION = "Memory cache"
SIZE = 256
TTL = 300
VALUE = ("[Source: runbook]\nRestart the worker only after draining its queue. " * 40)[:2000]


def _keys(count: int, tag: str) -> list[str]:
    return [make_key(f"{tag} query number {i}") for i in range(count)]


def run(bench: Bench) -> list[Row]:
    ops = bench.pick(20_000, 100_000)
    rounds = bench.pick(5, 9)
    live = _keys(SIZE, "live")
    absent = _keys(SIZE, "absent")
    fresh = _keys(ops, "fresh")
    ours = MemoryContextCache(SIZE, TTL)
    theirs: Any = cachetools.TTLCache(maxsize=SIZE, ttl=TTL, timer=time.monotonic)
    for key in live:
        ours.put(key, VALUE)
        theirs[key] = VALUE
    repeat = ops // SIZE
    live_ops = live * repeat
    absent_ops = absent * repeat

    def loop_get(get: Callable[[str], object], keys: list[str]) -> Callable[[], None]:
        def batch() -> None:
            for key in keys:
                get(key)

        return batch

    def loop_put(put: Callable[[str, str], object], keys: list[str]) -> Callable[[], None]:
        def batch() -> None:
            for key in keys:
                put(key, VALUE)

        return batch

    theirs_put = theirs.__setitem__
    cases = [
        ("get, hit", loop_get(ours.get, live_ops), loop_get(theirs.get, live_ops), len(live_ops)),
        (
            "get, miss",
            loop_get(ours.get, absent_ops),
            loop_get(theirs.get, absent_ops),
            len(absent_ops),
        ),
        (
            "put, existing key",
            loop_put(ours.put, live_ops),
            loop_put(theirs_put, live_ops),
            len(live_ops),
        ),
        (
            "put, new key into a full cache (evicts)",
            loop_put(ours.put, fresh),
            loop_put(theirs_put, fresh),
            len(fresh),
        ),
    ]
    rows = []
    for name, mine, base, count in cases:
        bench.say(f"memory cache: {name}")
        result = compare(mine, base, ops=count, rounds=rounds)
        target, met = at_least(result.ratio, 1.0)
        rows.append(
            Row(
                SECTION,
                f"{name} (size {SIZE})",
                rate(result.ours_ops_per_s),
                "cachetools.TTLCache",
                rate(result.base_ops_per_s),
                result.ratio,
                target,
                met,
                values={
                    "ours_ops_per_s": result.ours_ops_per_s,
                    "base_ops_per_s": result.base_ops_per_s,
                },
            )
        )
    return rows


def run_footprint(bench: Bench) -> list[Row]:
    entries = bench.pick(20_000, 100_000)
    keys = _keys(entries, "footprint")
    # Both caches hold the same key and value objects, allocated before tracing starts, so
    # only each structure's own per-entry cost is counted.

    def ours() -> object:
        cache = MemoryContextCache(entries, TTL)
        for key in keys:
            cache.put(key, VALUE)
        return cache

    def theirs() -> object:
        cache: Any = cachetools.TTLCache(maxsize=entries, ttl=TTL, timer=time.monotonic)
        for key in keys:
            cache[key] = VALUE
        return cache

    def measure(build: Callable[[], object]) -> float:
        samples = []
        for _ in range(3):
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            cache = build()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            del cache
            samples.append((after - before) / entries)
        return statistics.median(samples)

    bench.say(f"memory footprint: {entries:,} entries")
    mine = measure(ours)
    base = measure(theirs)
    return [
        Row(
            "Memory footprint",
            f"bytes per cached entry, {entries:,} entries (tracemalloc, keys and values excluded)",
            f"{mine:,.0f} B",
            "cachetools.TTLCache",
            f"{base:,.0f} B",
            mine / base,
            note="ratio: ours / theirs, lower is smaller",
            values={"ours_bytes": mine, "base_bytes": base},
        )
    ]
