"""The Redis layout on a real three-master Redis Cluster started by the test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.client import client_from_url
from contextstore.backends.redis.keys import NamespaceKeys
from contextstore.backends.redis.scripts import script
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.windows import Sample, WindowSummary
from tests.backends.redis import drop_namespace

pytestmark = pytest.mark.slow


@pytest.fixture
def namespaces_on_every_node(
    redis_cluster_client: RedisCluster, namespace: str
) -> Iterator[list[str]]:
    """One namespace per primary: their slots are served by three different nodes."""
    chosen: dict[str, str] = {}
    for suffix in range(1000):
        candidate = f"{namespace}_{suffix}"
        slot = redis_cluster_client.keyslot(NamespaceKeys.of(candidate).cache_lru)
        node = redis_cluster_client.nodes_manager.get_node_from_slot(slot).name
        chosen.setdefault(node, candidate)
        if len(chosen) == 3:
            break
    assert len(chosen) == 3
    yield list(chosen.values())
    for name in chosen.values():
        drop_namespace(redis_cluster_client, name)


def test_cache_evicts_and_counts_on_every_node(
    redis_cluster_client: RedisCluster, namespaces_on_every_node: list[str]
) -> None:
    for name in namespaces_on_every_node:
        cache = RedisContextCache(redis_cluster_client, namespace=name, max_size=2)
        cache.put("a", "A")
        cache.put("b", "B")
        assert cache.get("a") == "A"
        cache.put("c", "C")  # evicts b: an entry key derived inside the script
        assert cache.get("b") is None
        assert cache.stats() == {**cache.stats(), "size": 2, "hits": 1, "misses": 1, "errors": 0}
        cache.clear()
        assert cache.stats()["size"] == 0


def test_windows_are_shared_by_two_cluster_clients(
    redis_cluster_client: RedisCluster, namespaces_on_every_node: list[str]
) -> None:
    port = redis_cluster_client.get_default_node().port
    other = client_from_url(f"redis+cluster://127.0.0.1:{port}")
    try:
        for name in namespaces_on_every_node:
            first = RedisWindows(redis_cluster_client, namespace=name)
            second = RedisWindows(other, namespace=name)
            first.record(Sample(10.0, 100, 1, True))
            assert second.record(Sample(30.0, 300, 3, False)) == WindowSummary(
                2, 2, 20.0, 200.0, 2.0, 0.5
            )
            assert first.summary() == second.summary()
            second.clear()
    finally:
        other.close()


def test_scripts_reload_after_script_flush_on_every_node(
    redis_cluster_client: RedisCluster, namespaces_on_every_node: list[str]
) -> None:
    caches = [
        RedisContextCache(redis_cluster_client, namespace=n) for n in namespaces_on_every_node
    ]
    for cache in caches:
        cache.put("k", "v")
    redis_cluster_client.script_flush()  # this run's own cluster, never a shared server
    assert redis_cluster_client.script_exists(script("cache_get.lua").sha) == [False]
    for cache in caches:
        assert cache.get("k") == "v"
        assert cache.fault.errors == 0
