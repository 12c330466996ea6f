"""Backend harnesses: one contract test body runs against every implementation.

A harness builds a fresh, empty backend and knows how to let time pass for it: the memory
backends tick an injected fake clock; Redis backends (whose TTL is Redis's own) really wait.
Parameters: ``memory`` always; ``fakeredis`` always (simulated Redis, fast); ``redis`` when
``CONTEXTSTORE_TEST_REDIS_URL`` is set; ``cluster`` when the Redis Cluster fixture can start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = ["CacheHarness", "FakeClock", "WindowsHarness", "cache_harness", "windows_harness"]

BACKENDS = ["memory", "fakeredis", "redis", "cluster"]


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class CacheHarness:
    backend: str
    make: Callable[..., Any]  # make(max_size=256, ttl_seconds=300) -> ContextCache
    age: Callable[[float], None]  # let this many seconds pass for the cache's entries
    real_time: bool  # True when age() really sleeps (keep TTLs short then)
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowsHarness:
    backend: str
    make: Callable[[], Any]  # make() -> Windows, empty; two calls share state when shared
    shared: bool  # True when two made instances see the same windows (Redis)
    extras: dict[str, Any] = field(default_factory=dict)


def _redis_client(request: pytest.FixtureRequest, backend: str) -> Any:
    """A client for ``backend`` (fakeredis, redis or cluster); skips when unavailable."""
    if backend == "fakeredis":
        import fakeredis

        server = fakeredis.FakeServer()
        return fakeredis.FakeStrictRedis(server=server)
    if backend == "redis":
        import redis

        url = request.getfixturevalue("redis_url")
        return redis.Redis.from_url(url)
    if backend == "cluster":
        return request.getfixturevalue("redis_cluster_client")
    raise AssertionError(backend)


def _drop_namespace(client: Any, namespace: str) -> None:
    for key in client.scan_iter(match=f"*{{{namespace}}}*", count=500):
        client.delete(key)


@pytest.fixture(params=BACKENDS)
def cache_harness(request: pytest.FixtureRequest, namespace: str) -> Iterator[CacheHarness]:
    backend = request.param
    if backend == "memory":
        from contextstore.cache.memory import MemoryContextCache

        clock = FakeClock()

        def make_memory(**kwargs: Any) -> Any:
            return MemoryContextCache(clock=clock, **kwargs)

        yield CacheHarness("memory", make_memory, clock.advance, real_time=False)
        return

    from contextstore.redis.cache import RedisContextCache

    client = _redis_client(request, backend)

    def make_redis(**kwargs: Any) -> Any:
        kwargs.setdefault("namespace", namespace)
        return RedisContextCache(client, **kwargs)

    try:
        yield CacheHarness(
            backend, make_redis, time.sleep, real_time=True, extras={"client": client}
        )
    finally:
        _drop_namespace(client, namespace)


@pytest.fixture(params=BACKENDS)
def windows_harness(request: pytest.FixtureRequest, namespace: str) -> Iterator[WindowsHarness]:
    backend = request.param
    if backend == "memory":
        from contextstore.adaptive.memory import MemoryWindows

        yield WindowsHarness("memory", MemoryWindows, shared=False)
        return

    from contextstore.redis.windows import RedisWindows

    client = _redis_client(request, backend)
    try:
        yield WindowsHarness(
            backend,
            lambda: RedisWindows(client, namespace=namespace),
            shared=True,
            extras={"client": client},
        )
    finally:
        _drop_namespace(client, namespace)
