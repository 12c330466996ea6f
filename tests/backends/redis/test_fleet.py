"""Real processes sharing real Redis: exact fleet-wide counts (spawn start method).

Each worker process builds its own client from the URL, does its share, and reports its
counts back through a queue; the parent checks the totals. Bounded: workers are joined with a
timeout and killed if they overrun.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable
from typing import Any

import pytest

from contextstore.backends.redis.client import client_from_url
from contextstore.backends.redis.keys import NamespaceKeys
from tests.backends.redis import drop_namespace

pytestmark = pytest.mark.slow

PROCESSES = 4
RECORDS = 500
OPERATIONS = 2000
MAX_SIZE = 64
TIMEOUT = 120.0


def record_worker(url: str, namespace: str, results: Any) -> None:
    from contextstore.backends.redis.windows import RedisWindows
    from contextstore.config import ContextEngineConfig
    from contextstore.core.analysis import RuleBasedQueryAnalyzer
    from contextstore.engine.adaptive import AdaptiveLearningSystem

    client = client_from_url(url, socket_timeout=5)
    windows = RedisWindows(client, namespace=namespace)
    system = AdaptiveLearningSystem(ContextEngineConfig(), windows=windows)
    analysis = RuleBasedQueryAnalyzer().analyze("how do agents share context?")
    for i in range(RECORDS):
        system.record("q", analysis, 100 + i, 2, 15.0, True)
    results.put({"auto_tune_runs": system.auto_tune_runs, "errors": windows.fault.errors})
    client.close()


def cache_worker(url: str, namespace: str, seed: int, results: Any) -> None:
    from contextstore.backends.redis.cache import RedisContextCache

    client = client_from_url(url, socket_timeout=5)
    cache = RedisContextCache(client, namespace=namespace, max_size=MAX_SIZE)
    keys = NamespaceKeys.of(namespace)
    rng = random.Random(seed)
    gets = hits = largest = 0
    for step in range(OPERATIONS):
        key = f"k{rng.randrange(160)}"
        if rng.random() < 0.5:
            cache.put(key, f"{seed}:{step}")
        else:
            gets += 1
            value = cache.get(key)
            hits += value is not None
            assert value is None or value.count(":") == 1
        if step % 25 == 0:
            largest = max(largest, cache.stats()["size"], client.zcard(keys.cache_lru))
    results.put({"gets": gets, "hits": hits, "largest": largest, "errors": cache.fault.errors})
    client.close()


def run_fleet(
    target: Callable[..., None], argument_sets: list[tuple[Any, ...]]
) -> list[dict[str, int]]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=target, args=(*args, results)) for args in argument_sets]
    for process in processes:
        process.start()
    try:
        reports = [results.get(timeout=TIMEOUT) for _ in processes]
        for process in processes:
            process.join(timeout=TIMEOUT)
            assert process.exitcode == 0
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    return reports


def test_four_processes_record_exactly_2000_and_tune_exactly_100_times(
    redis_url: str, namespace: str
) -> None:
    from contextstore.backends.redis.windows import RedisWindows

    client = client_from_url(redis_url)
    try:
        reports = run_fleet(record_worker, [(redis_url, namespace)] * PROCESSES)
        assert sum(r["errors"] for r in reports) == 0
        summary = RedisWindows(client, namespace=namespace).summary()
        assert summary.total_queries == PROCESSES * RECORDS == 2000
        assert summary.samples == 100
        assert sum(r["auto_tune_runs"] for r in reports) == 2000 // 20 == 100
    finally:
        drop_namespace(client, namespace)
        client.close()


def test_four_processes_share_one_bounded_cache_with_exact_counters(
    redis_url: str, namespace: str
) -> None:
    from contextstore.backends.redis.cache import RedisContextCache

    client = client_from_url(redis_url)
    try:
        reports = run_fleet(
            cache_worker, [(redis_url, namespace, seed) for seed in range(PROCESSES)]
        )
        assert sum(r["errors"] for r in reports) == 0
        assert max(r["largest"] for r in reports) <= MAX_SIZE
        stats = RedisContextCache(client, namespace=namespace, max_size=MAX_SIZE).stats()
        gets = sum(r["gets"] for r in reports)
        assert stats["hits"] + stats["misses"] == gets
        assert stats["hits"] == sum(r["hits"] for r in reports)
        assert stats["size"] == MAX_SIZE  # 160 keys, ~4000 puts: the cache ends full
        entries = list(client.scan_iter(match=NamespaceKeys.of(namespace).cache_entry("*")))
        assert len(entries) == MAX_SIZE
    finally:
        drop_namespace(client, namespace)
        client.close()
