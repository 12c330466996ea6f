"""Redis dies in the middle of a stream of operations and comes back (docs/design/failures.md).

Each test starts its own server on a spare port, kills it (SIGKILL) from another thread while
the stream runs, then starts it again on the same port. No operation may raise; at most one
WARNING per retry interval; sharing must resume within 5 s on the same client objects.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.client import FaultPolicy, client_from_url
from contextstore.backends.redis.keys import NamespaceKeys
from contextstore.backends.redis.windows import RedisWindows
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.engine.adaptive import AdaptiveLearningSystem
from tests.backends.redis import shared_total
from tests.redis_cluster import RedisServer

pytestmark = pytest.mark.slow

INTERVAL = 0.25  # the retry interval under test, seconds
OUTAGE = 1.5  # how long the stream runs against a dead server, seconds
RESUME_WITHIN = 5.0


def redis_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("contextstore.backends.redis")
    ]


def run_outage(
    server: RedisServer,
    caplog: pytest.LogCaptureFixture,
    step: Callable[[int], None],
    shared: Callable[[], bool],
    fault: FaultPolicy,
    *,
    hang: bool = False,
    concurrent: int = 1,
) -> None:
    """Stream ``step`` through healthy → killed (or hung: SIGSTOP) mid-stream → restarted
    (or resumed: SIGCONT); check the promises."""
    caplog.set_level(logging.INFO, logger="contextstore")
    for i in range(30):
        step(i)
    assert shared(), "not shared before the outage"
    assert fault.errors == 0

    killer = threading.Timer(0.1, server.pause if hang else server.kill)
    started = time.monotonic()
    killer.start()
    i = 0
    while time.monotonic() - started < OUTAGE:
        step(i)  # must not raise, before, during or after the kill
        i += 1
    killer.join()
    elapsed = time.monotonic() - started
    warnings = redis_warnings(caplog)
    assert fault.errors >= 1
    assert 1 <= len(warnings) <= math.floor(elapsed / INTERVAL) + 1, len(warnings)
    # Operations already in flight when Redis goes away each fail (``concurrent`` at once);
    # after that, one probe per interval.
    assert fault.errors <= math.floor(elapsed / INTERVAL) + 1 + concurrent

    if hang:
        server.resume()  # the same server, its data intact
    else:
        server.start()  # same port, empty (nothing was saved)
    # Resumed means both: the fleet's state is shared again and the policy has stopped
    # routing around Redis. On a loaded machine one late reply can mark Redis down once
    # more just after it answered, so both are awaited together, within the same bound.
    restarted = time.monotonic()
    while not (shared() and not fault.down):
        step(i)
        i += 1
        assert time.monotonic() - restarted < RESUME_WITHIN, "sharing did not resume"


def test_cache_and_windows_survive_a_redis_crash(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = "outage"
    client = client_from_url(own_redis_server.url)
    fault = FaultPolicy(INTERVAL)
    cache = RedisContextCache(client, namespace=namespace, max_size=16, fault=fault)
    windows = RedisWindows(client, namespace=namespace, fault=fault)
    system = AdaptiveLearningSystem(ContextEngineConfig(), windows=windows)
    analysis = RuleBasedQueryAnalyzer().analyze("how do vector indexes work?")
    observer = redis.Redis(port=own_redis_server.port, socket_timeout=1, socket_connect_timeout=0.2)
    keys = NamespaceKeys.of(namespace)
    marker = {"token": ""}

    def step(i: int) -> None:
        cache.put(f"k{i % 20}", f"value {i}")
        cache.get(f"k{(i * 7) % 20}")
        assert cache.stats()["max_size"] == 16
        system.record("q", analysis, 500 + i % 50, 3, 20.0, True)
        system.suggest_budget(analysis)
        system.get_performance_report()

    def shared() -> bool:
        # A value put through the long-lived client must be visible to a separate client,
        # and the fleet-wide total must live in Redis again.
        marker["token"] = uuid.uuid4().hex
        cache.put("marker", marker["token"])
        before = windows.summary().total_queries
        system.record("q", analysis, 100, 1, 5.0, True)
        try:
            value = observer.get(keys.cache_entry("marker"))
            total = shared_total(observer, namespace)
        except redis.ConnectionError:
            return False
        return (
            value is not None
            and value.decode().endswith(marker["token"])
            and total is not None
            and int(total) == before + 1
        )

    try:
        run_outage(own_redis_server, caplog, step, shared, fault)
        assert cache.stats()["errors"] == fault.errors
    finally:
        observer.close()
        client.close()


@pytest.mark.parametrize("hang", [False, True], ids=["killed", "hung"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_engine_runs_through_a_redis_outage(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture, flavour: str, hang: bool
) -> None:
    """The sync engine, and the async engine with four runs gathered per step: no run
    raises while Redis is killed or hung (SIGSTOP), and sharing resumes by itself."""
    from contextstore.backends.redis.cache import AsyncRedisContextCache
    from contextstore.backends.redis.client import async_client_from_url
    from contextstore.backends.redis.windows import AsyncRedisWindows
    from contextstore.core.retrieval import InMemoryRetriever
    from contextstore.engine.aio import AsyncContextEngine
    from contextstore.engine.sync import ContextEngine

    namespace = "engine-outage"
    fault = FaultPolicy(INTERVAL)
    retriever = InMemoryRetriever()
    retriever.add(
        "Vector indexes store embeddings and answer nearest-neighbour queries quickly. "
        "They trade exactness for speed with structures such as HNSW graphs.",
        "notes.md",
    )
    config = ContextEngineConfig(namespace=namespace)
    runner = asyncio.Runner()
    if flavour == "sync":
        client: Any = client_from_url(own_redis_server.url)
        cache: Any = RedisContextCache(client, namespace=namespace, fault=fault)
        windows: Any = RedisWindows(client, namespace=namespace, fault=fault)
        engine = ContextEngine(config, retriever=retriever, cache=cache, windows=windows)

        def runs(queries: list[str]) -> list[Any]:
            return [engine.run(query) for query in queries]

        def summary() -> Any:
            return windows.summary()

    else:
        client = async_client_from_url(own_redis_server.url)
        cache = AsyncRedisContextCache(client, namespace=namespace, fault=fault)
        windows = AsyncRedisWindows(client, namespace=namespace, fault=fault)
        aengine = AsyncContextEngine(config, retriever=retriever, cache=cache, windows=windows)

        async def gathered(queries: list[str]) -> list[Any]:
            return list(await asyncio.gather(*(aengine.run(query) for query in queries)))

        def runs(queries: list[str]) -> list[Any]:
            return runner.run(gathered(queries))

        def summary() -> Any:
            return runner.run(windows.summary())

    observer = redis.Redis(port=own_redis_server.port, socket_timeout=1, socket_connect_timeout=0.2)
    results: list[Any] = []

    def step(i: int) -> None:
        results.extend(runs([f"how do vector indexes work {(i + k) % 5}?" for k in range(4)]))

    def shared() -> bool:
        before = summary().total_queries
        runs([f"what is HNSW {uuid.uuid4().hex}?"])  # a miss: put + record
        try:
            total = shared_total(observer, namespace)
            size = observer.zcard(NamespaceKeys.of(namespace).cache_lru)
        except redis.RedisError:
            return False
        return total is not None and int(total) == before + 1 and size >= 1

    try:
        run_outage(own_redis_server, caplog, step, shared, fault, hang=hang, concurrent=4)
        assert all(result.context for result in results)
        assert any(result.cache_hit for result in results)
    finally:
        observer.close()
        if flavour == "sync":
            client.close()
        else:
            runner.run(client.aclose())
        runner.close()


def test_how_long_a_run_waits_on_a_hung_redis(own_redis_server: RedisServer) -> None:
    """What docs/design/failures.md#redis promises for a hung server (SIGSTOP), with the
    default client and retry interval: the run that meets the hang waits out the socket
    timeout twice (the attempt and its one retry, 1 s each), never more; the runs after it
    skip Redis until the retry interval has passed, and then one run probes again and waits
    the same."""
    from contextstore.backends.redis.client import DEFAULT_RETRY_INTERVAL
    from contextstore.core.retrieval import InMemoryRetriever
    from contextstore.engine.sync import ContextEngine

    namespace = "hung"
    client = client_from_url(own_redis_server.url)  # default timeouts: 0.5 s connect, 1 s read
    fault = FaultPolicy()  # default retry interval
    retriever = InMemoryRetriever()
    retriever.add("Vector indexes answer nearest-neighbour queries quickly.", "notes.md")
    engine = ContextEngine(
        ContextEngineConfig(namespace=namespace),
        retriever=retriever,
        cache=RedisContextCache(client, namespace=namespace, fault=fault),
        windows=RedisWindows(client, namespace=namespace, fault=fault),
    )
    for i in range(10):
        engine.run(f"warm up {i}")
    own_redis_server.pause()
    durations: list[float] = []
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2 * DEFAULT_RETRY_INTERVAL + 4.5:
            began = time.monotonic()
            engine.run(f"how do vector indexes work {len(durations) % 7}?")
            durations.append(time.monotonic() - began)
    finally:
        own_redis_server.resume()
        client.close()
    slow = [d for d in durations if d >= 0.9]
    print(f"hung Redis: slowest run {max(durations):.2f} s; {len(slow)} slow of {len(durations)}")
    assert 1.9 <= max(durations) < 2.9  # two socket timeouts of 1 s, never a third
    assert len(slow) >= 2  # the first run, then a probe after the retry interval
    assert len(durations) - len(slow) >= 10  # the others did not wait
