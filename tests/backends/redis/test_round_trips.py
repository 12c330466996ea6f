"""Each operation is exactly one request to Redis: get 1, put 1, record 1, summary 1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.windows import Sample
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.engine.adaptive import AdaptiveLearningSystem
from tests.backends.redis import CountingConnection, drop_namespace


@pytest.fixture
def counting_client(redis_url: str, namespace: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, connection_class=CountingConnection)
    try:
        yield client
    finally:
        drop_namespace(client, namespace)
        client.close()


def requests(operation: Callable[[], Any]) -> int:
    before = CountingConnection.sent
    operation()
    return CountingConnection.sent - before


def test_cache_operations_are_one_round_trip_each(
    counting_client: redis.Redis, namespace: str
) -> None:
    cache = RedisContextCache(counting_client, namespace=namespace, max_size=2)
    # Warm up: the connection handshake and the first EVALSHA → NOSCRIPT → SCRIPT LOAD.
    cache.put("warm", "x")
    cache.get("warm")
    cache.get("absent")
    _ = cache.stats()
    cache.clear()
    assert requests(lambda: cache.put("a", "A")) == 1
    assert requests(lambda: cache.get("a")) == 1  # hit
    assert requests(lambda: cache.get("zz")) == 1  # miss
    assert requests(lambda: cache.put("b", "B")) == 1
    assert requests(lambda: cache.put("c", "C")) == 1  # with an eviction
    assert requests(cache.stats) == 1
    assert requests(cache.clear) == 1


def test_windows_operations_are_one_round_trip_each(
    counting_client: redis.Redis, namespace: str
) -> None:
    windows = RedisWindows(counting_client, namespace=namespace)
    windows.record(Sample(1.0, 1, 1, True))  # warm up
    for i in range(150):
        assert requests(lambda i=i: windows.record(Sample(float(i), i, 1, i % 3 > 0))) == 1
    assert requests(windows.summary) == 1
    assert requests(windows.clear) == 1


def test_the_learning_system_reads_the_windows_once_per_call(
    counting_client: redis.Redis, namespace: str
) -> None:
    system = AdaptiveLearningSystem(
        ContextEngineConfig(), windows=RedisWindows(counting_client, namespace=namespace)
    )
    analysis = RuleBasedQueryAnalyzer().analyze("what is a vector index?")
    system.record("q", analysis, 100, 2, 12.0, True)  # warm up
    assert requests(lambda: system.record("q", analysis, 100, 2, 12.0, True)) == 1
    assert requests(lambda: system.suggest_budget(analysis)) == 1
    assert requests(system.get_performance_report) == 1
