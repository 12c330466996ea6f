"""Backend harnesses: one contract test body runs against every implementation.

A harness builds a fresh, empty backend and knows how to let time pass for it: the memory
backends tick an injected fake clock; Redis backends (whose TTL is Redis's own) really wait.
Parameters: ``memory`` always; ``fakeredis`` always (simulated Redis, fast); ``redis`` when
``CONTEXTSTORE_TEST_REDIS_URL`` is set; ``cluster`` when the Redis Cluster fixture can start.
Each again as ``<backend>-async``: the asyncio implementation of the same backend
(``AsyncMemoryContextCache``, ``AsyncRedisContextCache`` on ``redis.asyncio``, …), driven
from the same sync test bodies through ``tests.aio.Blocking``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.aio import Blocking

__all__ = ["CacheHarness", "FakeClock", "WindowsHarness", "cache_harness", "windows_harness"]

SYNC_BACKENDS = ["memory", "fakeredis", "redis", "cluster"]
BACKENDS = SYNC_BACKENDS + [f"{backend}-async" for backend in SYNC_BACKENDS]


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


def _async_redis_client(request: pytest.FixtureRequest, backend: str, sync_client: Any) -> Any:
    """The asyncio client for ``backend``, reaching the same data as ``sync_client``."""
    if backend == "fakeredis":
        import fakeredis

        return fakeredis.FakeAsyncRedis(
            server=sync_client.connection_pool.connection_kwargs["server"]
        )
    if backend == "redis":
        import redis.asyncio

        return redis.asyncio.Redis.from_url(request.getfixturevalue("redis_url"))
    if backend == "cluster":
        from redis.asyncio.cluster import RedisCluster

        node = sync_client.get_default_node()
        return RedisCluster(host=node.host, port=node.port, socket_timeout=2)
    raise AssertionError(backend)


def _drop_namespace(client: Any, namespace: str) -> None:
    for key in client.scan_iter(match=f"*{{{namespace}}}*", count=500):
        client.delete(key)


@pytest.fixture(params=BACKENDS)
def cache_harness(request: pytest.FixtureRequest, namespace: str) -> Iterator[CacheHarness]:
    backend, _, flavour = request.param.partition("-")
    if flavour:
        yield from _async_cache_harness(request, backend, namespace)
        return
    if backend == "memory":
        from contextstore.backends.memory.cache import MemoryContextCache

        clock = FakeClock()

        def make_memory(**kwargs: Any) -> Any:
            return MemoryContextCache(clock=clock, **kwargs)

        yield CacheHarness("memory", make_memory, clock.advance, real_time=False)
        return

    from contextstore.backends.redis.cache import RedisContextCache

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
    backend, _, flavour = request.param.partition("-")
    if flavour:
        yield from _async_windows_harness(request, backend, namespace)
        return
    if backend == "memory":
        from contextstore.backends.memory.windows import MemoryWindows

        yield WindowsHarness("memory", MemoryWindows, shared=False)
        return

    from contextstore.backends.redis.windows import RedisWindows

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


def _async_cache_harness(
    request: pytest.FixtureRequest, backend: str, namespace: str
) -> Iterator[CacheHarness]:
    name = f"{backend}-async"
    with asyncio.Runner() as runner:
        if backend == "memory":
            from contextstore.backends.memory.cache import AsyncMemoryContextCache

            clock = FakeClock()

            def make_memory(**kwargs: Any) -> Any:
                return Blocking(AsyncMemoryContextCache(clock=clock, **kwargs), runner)

            yield CacheHarness(name, make_memory, clock.advance, real_time=False)
            return

        from contextstore.backends.redis.cache import AsyncRedisContextCache

        client = _redis_client(request, backend)
        aclient = _async_redis_client(request, backend, client)

        def make_redis(**kwargs: Any) -> Any:
            kwargs.setdefault("namespace", namespace)
            return Blocking(AsyncRedisContextCache(aclient, **kwargs), runner)

        try:
            yield CacheHarness(
                name, make_redis, time.sleep, real_time=True, extras={"client": client}
            )
        finally:
            _drop_namespace(client, namespace)
            runner.run(aclient.aclose())


def _async_windows_harness(
    request: pytest.FixtureRequest, backend: str, namespace: str
) -> Iterator[WindowsHarness]:
    name = f"{backend}-async"
    with asyncio.Runner() as runner:
        if backend == "memory":
            from contextstore.backends.memory.windows import AsyncMemoryWindows

            yield WindowsHarness(name, lambda: Blocking(AsyncMemoryWindows(), runner), shared=False)
            return

        from contextstore.backends.redis.windows import AsyncRedisWindows

        client = _redis_client(request, backend)
        aclient = _async_redis_client(request, backend, client)
        try:
            yield WindowsHarness(
                name,
                lambda: Blocking(AsyncRedisWindows(aclient, namespace=namespace), runner),
                shared=True,
                extras={"client": client},
            )
        finally:
            _drop_namespace(client, namespace)
            runner.run(aclient.aclose())
