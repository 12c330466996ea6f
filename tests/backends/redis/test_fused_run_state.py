"""The fused run state (``backends.redis.phases``) answers every run as the plain one does.

Four engines, each on a namespace of its own in the same Redis: the sync engine with the
plain run state (the cache and the windows called one by one) is the reference; the sync
engine with ``FusedRunState`` and the async engine with the plain and the fused run state
must return the same results, run for run, and leave the same windows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from contextstore.backends.redis.cache import AsyncRedisContextCache, RedisContextCache
from contextstore.backends.redis.client import FaultPolicy
from contextstore.backends.redis.phases import (
    AsyncFusedRunState,
    FusedRunState,
    async_fused_state,
    fused_state,
)
from contextstore.backends.redis.windows import AsyncRedisWindows, RedisWindows
from contextstore.core.lessons import InMemoryLessons
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.separate import AsyncSeparateRunState, SeparateRunState
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import load_lessons, sample_retriever
from tests.backends.contract.runs import adriven, assert_same_runs, driven, engine_options
from tests.backends.redis import drop_namespace


def async_client(client: Any, request: pytest.FixtureRequest) -> Any:
    """An asyncio client reaching the same data as ``client``."""
    server = client.connection_pool.connection_kwargs.get("server")
    if server is not None:
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=server)
    import redis.asyncio

    return redis.asyncio.Redis.from_url(request.getfixturevalue("redis_url"))


def pair(cache_type: Any, windows_type: Any, client: Any, namespace: str) -> tuple[Any, Any]:
    """A cache and windows of ``namespace`` on ``client``, sharing one fault policy."""
    fault = FaultPolicy()
    return (
        cache_type(client, namespace=namespace, fault=fault),
        windows_type(client, namespace=namespace, fault=fault),
    )


@pytest.fixture
def namespaces(client: Any, namespace: str) -> Iterator[list[str]]:
    names = [f"{namespace}_{flavour}" for flavour in ("plain", "fused", "aplain", "afused")]
    try:
        yield names
    finally:
        for name in names:
            drop_namespace(client, name)


def test_the_fused_run_state_answers_as_the_plain_one(
    client: Any, namespaces: list[str], request: pytest.FixtureRequest
) -> None:
    retriever = sample_retriever()
    lessons = InMemoryLessons(load_lessons())

    plain_cache, plain_windows = pair(RedisContextCache, RedisWindows, client, namespaces[0])
    fused_cache, fused_windows = pair(RedisContextCache, RedisWindows, client, namespaces[1])
    fused = fused_state(fused_cache, fused_windows)
    assert isinstance(fused, FusedRunState)
    # Another namespace or another fault policy: the scripts cannot serve both parts.
    assert fused_state(plain_cache, fused_windows) is None
    assert fused_state(fused_cache, RedisWindows(client, namespace=namespaces[1])) is None
    engines = [
        ContextEngine(
            retriever=retriever,
            lessons=lessons,
            cache=plain_cache,
            windows=plain_windows,
            **engine_options(),
        ),
        ContextEngine(
            retriever=retriever,
            lessons=lessons,
            cache=fused_cache,
            windows=fused_windows,
            state=fused,
            **engine_options(),
        ),
    ]
    assert isinstance(engines[0].state, SeparateRunState)
    aclient = async_client(client, request)
    with asyncio.Runner() as runner:
        flavour = (AsyncRedisContextCache, AsyncRedisWindows, aclient)
        aplain_cache, aplain_windows = pair(*flavour, namespaces[2])
        afused_cache, afused_windows = pair(*flavour, namespaces[3])
        afused = async_fused_state(afused_cache, afused_windows)
        assert isinstance(afused, AsyncFusedRunState)
        assert async_fused_state(fused_cache, fused_windows) is None  # blocking parts
        asynchronous = [
            AsyncContextEngine(
                retriever=retriever,
                lessons=lessons,
                cache=aplain_cache,
                windows=aplain_windows,
                **engine_options(),
            ),
            AsyncContextEngine(
                retriever=retriever,
                lessons=lessons,
                cache=afused_cache,
                windows=afused_windows,
                state=afused,
                **engine_options(),
            ),
        ]
        assert isinstance(asynchronous[0].state, AsyncSeparateRunState)

        def change() -> None:
            retriever.add("Failover drills run every quarter, on a Tuesday.", "drills.md")
            lessons.add(replace(load_lessons()[1], entity_id="nw.lessons.ops.contract.0001"))

        try:
            assert_same_runs(
                [
                    driven("sync, plain", engines[0]),
                    driven("sync, fused", engines[1]),
                    adriven("async, plain", asynchronous[0], runner),
                    adriven("async, fused", asynchronous[1], runner),
                ],
                change,
            )
        finally:
            runner.run(aclient.aclose())
