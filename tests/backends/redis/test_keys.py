"""The key builder: one schema, every key of a namespace in one cluster slot."""

from __future__ import annotations

import fakeredis
import pytest
from redis.crc import key_slot

from contextstore.backends.redis.keys import NamespaceKeys, check_namespace, key, namespace_pattern
from contextstore.errors import ConfigurationError


def all_keys(keys: NamespaceKeys) -> list[str]:
    return [
        keys.cache_lru,
        keys.cache_ttl,
        keys.cache_stats,
        keys.cache_entry("0cc175b9c0f1b6a831c399e269772661"),
        keys.cache_entry("a key with {braces} and : colons"),
        keys.windows,
    ]


def test_schema_is_the_documented_one() -> None:
    keys = NamespaceKeys.of("tenant-1")
    assert keys.cache_lru == "cs:{tenant-1}:cache:lru"
    assert keys.cache_ttl == "cs:{tenant-1}:cache:ttl"
    assert keys.cache_stats == "cs:{tenant-1}:cache:stats"
    assert keys.cache_entry_prefix == "cs:{tenant-1}:cache:e:"
    assert keys.cache_entry("abc") == "cs:{tenant-1}:cache:e:abc"
    assert keys.windows == "cs:{tenant-1}:win"
    assert key("tenant-1", "x", "y") == "cs:{tenant-1}:x:y"


@pytest.mark.parametrize("namespace", ["default", "a", "tenant:eu.west", "ünï cødé", "a*b?[c]\\"])
def test_every_key_of_a_namespace_hashes_to_one_slot(namespace: str) -> None:
    keys = NamespaceKeys.of(namespace)
    slots = {key_slot(k.encode()) for k in all_keys(keys)}
    assert slots == {key_slot(namespace.encode())}


def test_two_namespaces_share_no_key() -> None:
    first, second = NamespaceKeys.of("a"), NamespaceKeys.of("ab")
    assert not set(all_keys(first)) & set(all_keys(second))


@pytest.mark.parametrize("bad", ["", "a{b", "a}b", "{a}", 5, None])
def test_unusable_namespaces_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        check_namespace(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        NamespaceKeys.of(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("namespace", ["a*b", "a?b", "a[b]", "a\\b", "plain"])
def test_namespace_pattern_matches_exactly_its_own_keys(namespace: str) -> None:
    client = fakeredis.FakeStrictRedis()
    mine = NamespaceKeys.of(namespace)
    lookalikes = ["aXb", "a*bc", "ab", "a[b]x", "a\\\\b", "plainer", "xplain"]
    for name in [namespace, *lookalikes]:
        client.set(NamespaceKeys.of(name).cache_ttl, 1)
    found = {k.decode() for k in client.scan_iter(match=namespace_pattern(namespace))}
    assert found == {mine.cache_ttl}
