"""The Redis cache and windows against raw redis-py commands on the same client and server."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.context import Bench
from benchmarks.report import Row, at_least, rate
from benchmarks.services import RedisCounter
from benchmarks.timing import Comparison, compare
from contextstore.backends.cache import make_key
from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.windows import Sample
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.engine.adaptive import AdaptiveLearningSystem

SIZE = 256
TTL_SECONDS = 300
VALUE = ("[Source: runbook]\nRestart the worker only after draining its queue. " * 40)[:2000]
RAW_VALUE = VALUE.encode("utf-8")
TARGET = 0.8


def _row(
    section: str, name: str, baseline: str, result: Comparison, trips: tuple[float, float]
) -> Row:
    target, met = at_least(result.ratio, TARGET)
    ours_trips, base_trips = trips
    return Row(
        section,
        name,
        rate(result.ours_ops_per_s),
        baseline,
        rate(result.base_ops_per_s),
        result.ratio,
        target,
        met,
        note=f"round trips per call: {ours_trips:g} (baseline {base_trips:g})",
        values={
            "ours_ops_per_s": result.ours_ops_per_s,
            "base_ops_per_s": result.base_ops_per_s,
            "ours_round_trips": ours_trips,
            "base_round_trips": base_trips,
        },
    )


def _trips(counter: RedisCounter, call: Callable[[], object], times: int = 20) -> float:
    before = counter.sends
    for _ in range(times):
        call()
    return (counter.sends - before) / times


def _batch(call: Callable[[], object], ops: int) -> Callable[[], None]:
    def batch() -> None:
        for _ in range(ops):
            call()

    return batch


def run_cache(bench: Bench) -> list[Row]:
    client = bench.services.redis_client()
    counter = RedisCounter().attach(client)
    namespace = bench.services.namespace("cache")
    raw_prefix = f"cs:{{{namespace}}}:raw:"
    ops = bench.pick(200, 500)
    rounds = bench.pick(5, 9)
    cache = RedisContextCache(client, namespace=namespace, max_size=SIZE, ttl_seconds=TTL_SECONDS)
    live = [make_key(f"live query {i}") for i in range(SIZE)]
    raw = [f"{raw_prefix}{i}" for i in range(SIZE)]
    bench.say("redis cache: filling")
    for key, raw_key in zip(live, raw, strict=True):
        cache.put(key, VALUE)
        client.set(raw_key, RAW_VALUE, px=TTL_SECONDS * 1000)
    live_cycle: Iterator[str] = itertools.cycle(live)
    raw_cycle: Iterator[str] = itertools.cycle(raw)
    # Made up front: hashing inside the timed loop would charge ours for work the raw
    # baseline does not do.
    fresh: Iterator[str] = iter(
        [make_key(f"fresh query {i}") for i in range(ops * (rounds + 2) + 100)]
    )

    def ours_get() -> object:
        return cache.get(next(live_cycle))

    def raw_get() -> object:
        return client.get(next(raw_cycle))

    def ours_put() -> object:
        cache.put(next(live_cycle), VALUE)
        return None

    def ours_put_new() -> object:
        cache.put(next(fresh), VALUE)
        return None

    def raw_set() -> object:
        return client.set(next(raw_cycle), RAW_VALUE, px=TTL_SECONDS * 1000)

    section = "Redis cache"
    rows = []
    cases: list[tuple[str, Callable[[], object], str, Callable[[], object]]] = [
        ("get, hit (Lua: GET + recency + stats)", ours_get, "raw GET", raw_get),
        ("put, existing key (Lua: SET PX + recency)", ours_put, "raw SET PX", raw_set),
        ("put, new key into a full cache (evicts)", ours_put_new, "raw SET PX", raw_set),
    ]
    for name, mine, base_name, base in cases:
        bench.say(f"redis cache: {name}")
        result = compare(_batch(mine, ops), _batch(base, ops), ops=ops, rounds=rounds)
        trips = (_trips(counter, mine), _trips(counter, base))
        rows.append(_row(section, name, base_name, result, trips))
    return rows


def run_windows(bench: Bench) -> list[Row]:
    client = bench.services.redis_client()
    counter = RedisCounter().attach(client)
    namespace = bench.services.namespace("windows")
    raw_key = f"cs:{{{namespace}}}:raw:probe"
    client.set(raw_key, b"1" * 64)
    ops = bench.pick(200, 500)
    rounds = bench.pick(5, 9)
    windows = RedisWindows(client, namespace=namespace)
    system = AdaptiveLearningSystem(ContextEngineConfig(), windows)
    analysis = RuleBasedQueryAnalyzer().analyze("How do I roll back a failed billing deploy?")
    sample = Sample(response_ms=12.5, context_length=1800, chunk_count=4, guard_passed=True)
    bench.say("redis windows: filling the window")
    for _ in range(windows.window):
        windows.record(sample)

    def record() -> Any:
        return windows.record(sample)

    def suggest() -> Any:
        return system.suggest_budget(analysis)

    def raw_get() -> Any:
        return client.get(raw_key)

    section = "Redis windows"
    rows = []
    for name, mine in (
        ("record() (Lua: ring slot, sums, total)", record),
        ("AdaptiveLearningSystem.suggest_budget() (reads the summary)", suggest),
    ):
        bench.say(f"redis windows: {name}")
        result = compare(_batch(mine, ops), _batch(raw_get, ops), ops=ops, rounds=rounds)
        trips = (_trips(counter, mine), _trips(counter, raw_get))
        rows.append(_row(section, name, "raw GET", result, trips))
    return rows
