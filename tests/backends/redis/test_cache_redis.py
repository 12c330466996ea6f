"""RedisContextCache beyond the shared contract: stored format, planted values, TTL,
namespaces, script reloading, client options. Runs on fakeredis and on real Redis."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.client import FaultPolicy
from contextstore.backends.redis.keys import ENTRY_MAGIC, NamespaceKeys
from contextstore.backends.redis.scripts import script
from contextstore.errors import ConfigurationError, ValidationError
from tests.backends.redis import drop_namespace, make_client, namespace_keys
from tests.harness import FakeClock
from tests.redis_cluster import RedisServer, free_port


class Explodes:
    """Unpickling this would write a marker file: proof that nothing is unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.marker, "unpickled!"))


def plant(client: Any, namespace: str, key: str, value: Any) -> None:
    """Write ``value`` where the cache keeps ``key``, as if it had cached it."""
    keys = NamespaceKeys.of(namespace)
    client.set(keys.cache_entry(key), value)
    client.zadd(keys.cache_lru, {key: 10**9})


def test_values_are_stored_as_marked_utf8_text_with_a_redis_ttl(
    client: Any, namespace: str
) -> None:
    cache = RedisContextCache(client, namespace=namespace, ttl_seconds=30)
    cache.put("k", "مرحبا — context")
    entry = NamespaceKeys.of(namespace).cache_entry("k")
    assert client.get(entry) == (ENTRY_MAGIC + "مرحبا — context").encode()
    assert 29_000 < client.pttl(entry) <= 30_000


def test_a_get_does_not_extend_the_ttl(client: Any, namespace: str) -> None:
    cache = RedisContextCache(client, namespace=namespace, ttl_seconds=30)
    cache.put("k", "v")
    entry = NamespaceKeys.of(namespace).cache_entry("k")
    client.pexpire(entry, 5_000)
    assert cache.get("k") == "v"
    assert client.pttl(entry) <= 5_000


def test_fractional_ttl_becomes_whole_milliseconds(client: Any, namespace: str) -> None:
    cache = RedisContextCache(client, namespace=namespace, ttl_seconds=0.0001)
    cache.put("k", "v")
    assert client.pttl(NamespaceKeys.of(namespace).cache_entry("k")) in (-2, 0, 1)


def test_a_planted_pickle_is_a_miss_and_never_unpickled(
    client: Any, namespace: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    cache = RedisContextCache(client, namespace=namespace)
    plant(client, namespace, "k", pickle.dumps(Explodes(marker)))
    assert cache.get("k") is None
    assert not marker.exists()
    assert (cache.stats()["hits"], cache.stats()["misses"], cache.stats()["size"]) == (0, 1, 0)
    assert not client.exists(NamespaceKeys.of(namespace).cache_entry("k"))


@pytest.mark.parametrize(
    "planted",
    [
        b"\xff\xfe\x00not utf-8",
        b"plain text another tool wrote",
        (ENTRY_MAGIC + "ok").encode("utf-16"),
        b"",
        ENTRY_MAGIC[:-1].encode(),
    ],
)
def test_values_the_cache_did_not_write_are_misses(
    client: Any, namespace: str, planted: bytes
) -> None:
    cache = RedisContextCache(client, namespace=namespace)
    plant(client, namespace, "k", planted)
    assert cache.get("k") is None
    assert (cache.stats()["hits"], cache.stats()["misses"]) == (0, 1)
    cache.put("k", "fresh")  # the key is usable again
    assert cache.get("k") == "fresh"


@pytest.mark.parametrize("tail", [b"\xff", b"\xc3\x28", b"ok\x80", b"\xed\xa0"])
def test_forged_marker_with_invalid_utf8_is_a_miss(
    client: Any, namespace: str, tail: bytes
) -> None:
    cache = RedisContextCache(client, namespace=namespace)
    plant(client, namespace, "k", ENTRY_MAGIC.encode() + tail)
    assert cache.get("k") is None
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["size"]) == (0, 1, 0)


def test_a_key_of_another_type_is_a_miss(client: Any, namespace: str) -> None:
    keys = NamespaceKeys.of(namespace)
    client.hset(keys.cache_entry("k"), "field", "value")
    client.zadd(keys.cache_lru, {"k": 1})
    cache = RedisContextCache(client, namespace=namespace)
    assert cache.get("k") is None
    cache.put("k", "v")
    assert cache.get("k") == "v"


def test_a_decoding_client_works_and_misses_on_forged_bytes(
    request: pytest.FixtureRequest, client: Any, namespace: str
) -> None:
    backend = request.node.callspec.params["client"]
    decoding = make_client(request, backend, decode_responses=True)
    if backend == "fakeredis":
        decoding = type(client)(
            server=client.connection_pool.connection_kwargs["server"], decode_responses=True
        )
    cache = RedisContextCache(decoding, namespace=namespace)
    cache.put("k", "نص 🧠")
    assert cache.get("k") == "نص 🧠"
    plant(client, namespace, "bad", ENTRY_MAGIC.encode() + b"\xff")
    assert cache.get("bad") is None
    assert (cache.stats()["hits"], cache.stats()["misses"]) == (1, 1)


def test_lone_surrogates_round_trip(client: Any, namespace: str) -> None:
    cache = RedisContextCache(client, namespace=namespace)
    cache.put("key \udc80", "text \ud800 end")
    assert cache.get("key \udc80") == "text \ud800 end"


def test_namespaces_never_see_each_other(client: Any, namespace: str) -> None:
    other = namespace + "_other"
    try:
        first = RedisContextCache(client, namespace=namespace, max_size=2)
        second = RedisContextCache(client, namespace=other, max_size=2)
        first.put("k", "first")
        assert second.get("k") is None
        second.put("k", "second")
        second.put("k2", "second2")
        second.put("k3", "second3")  # evicts in its own namespace only
        assert first.get("k") == "first"
        assert first.stats() == {**first.stats(), "size": 1, "hits": 1, "misses": 0}
        assert (second.stats()["size"], second.stats()["misses"]) == (2, 1)
        second.clear()
        assert first.get("k") == "first"
        for name in namespace_keys(client, namespace):
            assert name.startswith("cs:{" + namespace + "}:")
    finally:
        drop_namespace(client, other)


def test_every_key_written_comes_from_the_schema(client: Any, namespace: str) -> None:
    cache = RedisContextCache(client, namespace=namespace, max_size=2)
    for key in ("a", "b", "c"):
        cache.put(key, key)
    assert cache.get("a") is None
    assert cache.get("c") == "c"
    keys = NamespaceKeys.of(namespace)
    assert namespace_keys(client, namespace) == {
        keys.cache_entry("b"),
        keys.cache_entry("c"),
        keys.cache_lru,
        keys.cache_ttl,
        keys.cache_stats,
    }


def test_two_instances_share_lru_order_and_counters(client: Any, namespace: str) -> None:
    first = RedisContextCache(client, namespace=namespace, max_size=2)
    second = RedisContextCache(client, namespace=namespace, max_size=2)
    first.put("a", "A")
    second.put("b", "B")
    assert second.get("a") == "A"  # b is now the fleet's least recently used
    first.put("c", "C")
    assert first.get("b") is None
    assert second.stats()["hits"] == 1
    assert second.stats()["misses"] == 1


def test_stats_report_errors(client: Any, namespace: str) -> None:
    stats = RedisContextCache(client, namespace=namespace).stats()
    assert stats["errors"] == 0


def test_bad_arguments_are_refused(client: Any) -> None:
    with pytest.raises(ValidationError, match="max_size"):
        RedisContextCache(client, max_size=0)
    with pytest.raises(ValidationError, match="ttl_seconds"):
        RedisContextCache(client, ttl_seconds=float("inf"))
    with pytest.raises(ConfigurationError, match="namespace"):
        RedisContextCache(client, namespace="a{b}")


def test_from_url_owns_and_closes_its_client(redis_url: str, namespace: str) -> None:
    closed: list[bool] = []
    with RedisContextCache.from_url(
        redis_url, namespace=namespace, max_size=3, client_options={"socket_timeout": 2.0}
    ) as cache:
        try:
            assert cache.client.connection_pool.connection_kwargs["socket_timeout"] == 2.0
            cache.put("k", "v")
            assert cache.get("k") == "v"
            assert repr(cache) == (
                f"RedisContextCache(namespace={namespace!r}, max_size=3, ttl_seconds=300.0)"
            )
        finally:
            drop_namespace(cache.client, namespace)
        original = cache.client.close
        cache.client.close = lambda: closed.append(True) or original()  # type: ignore[method-assign]
    assert closed == [True]


def test_a_client_passed_in_is_left_open(client: Any, namespace: str) -> None:
    with RedisContextCache(client, namespace=namespace) as cache:
        cache.put("k", "v")
    assert client.ping()


def test_scripts_reload_after_script_flush(own_redis_server: RedisServer) -> None:
    client = redis.Redis(port=own_redis_server.port)
    try:
        cache = RedisContextCache(client, namespace="flush")
        cache.put("k", "v")
        assert cache.get("k") == "v"
        client.script_flush()
        assert client.script_exists(script("cache_get.lua").sha) == [False]
        assert cache.get("k") == "v"
        cache.put("k2", "v2")
        cache.clear()
        assert cache.stats()["size"] == 0
        assert cache.fault.errors == 0
    finally:
        client.close()


class RefusingConnection(redis.Connection):
    """Counts connection attempts to a port nobody listens on."""

    attempts = 0

    def connect(self) -> None:
        RefusingConnection.attempts += 1
        super().connect()


def test_unreachable_redis_is_a_miss_and_a_no_op(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="contextstore.backends.redis")
    client = redis.Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0",
        connection_class=RefusingConnection,
        socket_connect_timeout=0.2,
        retry=Retry(NoBackoff(), 0),
    )
    clock = FakeClock()
    cache = RedisContextCache(client, namespace="down", fault=FaultPolicy(1.0, clock=clock))
    RefusingConnection.attempts = 0
    cache.put("k", "v")  # fails: the cool-down starts
    for _ in range(20):  # inside the cool-down Redis is not even dialled
        assert cache.get("k") is None
        cache.put("k", "v")
        cache.clear()
        clock.advance(0.04)
    assert RefusingConnection.attempts == 1
    stats = cache.stats()
    assert (stats["size"], stats["hits"], stats["misses"], stats["errors"]) == (0, 0, 0, 1)
    clock.advance(1.0)
    assert cache.get("k") is None  # one more attempt after the interval
    assert (RefusingConnection.attempts, cache.stats()["errors"]) == (2, 2)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
    client.close()
