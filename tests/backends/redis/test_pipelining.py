"""The async driver sends the calls of concurrent operations as one pipeline (fakeredis and a
real server): each answered on its own, NOSCRIPT recovered, a fault answered by the fallback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from contextstore.backends.redis.cache import AsyncRedisContextCache
from contextstore.backends.redis.client import FaultPolicy
from contextstore.backends.redis.ops import AsyncDriver, Call
from tests.backends.redis import drop_namespace

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["fakeredis", "redis"])
def async_client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    if request.param == "fakeredis":
        pytest.importorskip("lupa", reason="fakeredis runs Lua scripts only with lupa")
        import fakeredis

        yield fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        return
    url = request.getfixturevalue("redis_url")
    yield redis.asyncio.Redis.from_url(url)
    sync = redis.Redis.from_url(url)
    drop_namespace(sync, namespace)
    sync.close()


def recording(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many calls each batch of the async driver held, in order."""
    sizes: list[int] = []
    pipelined = AsyncDriver._pipelined

    async def recorded(self: AsyncDriver, calls: list[Call]) -> list[object]:
        sizes.append(len(calls))
        return await pipelined(self, calls)

    monkeypatch.setattr(AsyncDriver, "_pipelined", recorded)
    return sizes


async def test_concurrent_operations_go_as_one_pipeline_and_each_gets_its_own_reply(
    async_client: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = recording(monkeypatch)
    cache = AsyncRedisContextCache(async_client, namespace=namespace, max_size=100)
    await asyncio.gather(*(cache.put(f"key-{i}", f"context {i}") for i in range(30)))
    found = await asyncio.gather(*(cache.get(f"key-{i}") for i in range(35)))
    assert found == [f"context {i}" for i in range(30)] + [None] * 5
    assert await cache.get("key-7") == "context 7"
    # Each burst was queued in one loop turn: one pipeline each; the lone get went alone.
    assert sizes == [30, 35, 1]
    await async_client.aclose()


async def test_a_script_the_server_lost_is_sent_again_inside_a_pipeline(
    async_client: Any, namespace: str
) -> None:
    cache = AsyncRedisContextCache(async_client, namespace=namespace, max_size=100)
    await asyncio.gather(*(cache.put(f"key-{i}", f"context {i}") for i in range(5)))
    await async_client.script_flush()  # a restarted server, a failover: NOSCRIPT next
    found = await asyncio.gather(*(cache.get(f"key-{i}") for i in range(5)))
    assert found == [f"context {i}" for i in range(5)]
    assert cache.fault.errors == 0
    await async_client.aclose()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_pipeline_that_cannot_reach_redis_answers_every_call_with_the_fallback(
    namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.asyncio.Redis(port=_closed_port(), socket_connect_timeout=0.2)
    fault = FaultPolicy(60)
    cache = AsyncRedisContextCache(client, namespace=namespace, fault=fault)
    with caplog.at_level("WARNING", logger="contextstore.backends.redis"):
        found = await asyncio.gather(*(cache.get(f"key-{i}") for i in range(8)))
        await asyncio.gather(*(cache.put(f"key-{i}", "x") for i in range(8)))
    assert found == [None] * 8
    # The eight gets were in flight together and failed together; the puts came during the
    # retry interval and were not tried.
    assert fault.errors == 8 and fault.down
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    await client.aclose()
