"""The ContextCache contract (docs/design/cache-and-windows.md), run on every backend through
``cache_harness``.

Time passes through ``cache_harness.age``: a fake clock for memory, a real sleep for Redis,
so TTLs here are short and every age leaves at least 0.1 s of margin either side of a TTL.
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict

import pytest

from contextstore.backends.cache import AsyncContextCache, ContextCache, make_key
from contextstore.errors import ValidationError
from tests.harness import CacheHarness

TTL = 0.3  # short: Redis backends really wait
PAST_TTL = 0.4


def test_empty_cache_misses(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    interface = AsyncContextCache if cache_harness.backend.endswith("-async") else ContextCache
    assert isinstance(getattr(cache, "target", cache), interface)
    assert cache.get("absent") is None
    assert cache.stats()["misses"] == 1
    assert cache.stats()["hits"] == 0


def test_put_then_get_round_trips(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    cache.put("k", "context")
    assert cache.get("k") == "context"
    assert cache.stats()["hits"] == 1


def test_recently_read_key_survives_eviction(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(max_size=2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a becomes the most recently used; b is now the LRU
    cache.put("c", "C")
    assert cache.get("b") is None
    assert cache.get("a") == "A"
    assert cache.get("c") == "C"


def test_eviction_without_reads_takes_the_oldest(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(max_size=3)
    for key in "abcd":
        cache.put(key, key.upper())
    assert cache.get("a") is None
    assert [cache.get(k) for k in "bcd"] == ["B", "C", "D"]


def test_put_on_existing_key_refreshes_value_and_recency(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(max_size=2)
    cache.put("a", "old")
    cache.put("b", "B")
    cache.put("a", "new")  # a is the most recently used again; b is the LRU
    assert cache.stats()["size"] == 2
    cache.put("c", "C")
    assert cache.get("b") is None
    assert cache.get("a") == "new"
    assert cache.get("c") == "C"


def test_put_on_existing_key_refreshes_age(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(ttl_seconds=0.5)
    cache.put("a", "v1")
    cache_harness.age(0.3)
    cache.put("a", "v2")
    cache_harness.age(0.3)  # 0.6 s since the first put, 0.3 s since the second
    assert cache.get("a") == "v2"


def test_expired_entry_is_never_returned_and_counts_as_a_miss(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(ttl_seconds=TTL)
    cache.put("a", "A")
    assert cache.get("a") == "A"
    cache_harness.age(PAST_TTL)
    assert cache.get("a") is None
    assert cache.get("a") is None
    stats = cache.stats()
    assert (stats["hits"], stats["misses"]) == (1, 2)


def test_reading_an_expired_entry_does_not_revive_it(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(ttl_seconds=TTL)
    cache.put("a", "A")
    cache_harness.age(PAST_TTL)
    assert cache.get("a") is None
    cache.put("a", "A2")  # a fresh put makes it live again
    assert cache.get("a") == "A2"


def test_full_cache_drops_expired_entries_before_evicting_the_lru(
    cache_harness: CacheHarness,
) -> None:
    cache = cache_harness.make(max_size=3, ttl_seconds=0.5)
    cache.put("old", "O")
    cache_harness.age(0.3)
    cache.put("live1", "L1")
    cache.put("live2", "L2")
    # Reading "old" makes it the most recently used, so the LRU ("live1") is live while the
    # entry that is about to expire sits at the fresh end of the recency order.
    assert cache.get("old") == "O"
    cache_harness.age(0.3)  # old: 0.6 s (expired); live1, live2: 0.3 s (live)
    cache.put("new", "N")
    assert cache.get("live1") == "L1"
    assert cache.get("live2") == "L2"
    assert cache.get("new") == "N"
    assert cache.get("old") is None
    assert cache.stats()["size"] == 3


def test_full_cache_of_expired_entries_takes_new_ones_without_evicting_live(
    cache_harness: CacheHarness,
) -> None:
    cache = cache_harness.make(max_size=2, ttl_seconds=TTL)
    cache.put("x", "X")
    cache.put("y", "Y")
    cache_harness.age(PAST_TTL)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"
    assert cache.get("b") == "B"
    assert cache.stats()["size"] == 2


def test_size_counts_only_live_entries(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(ttl_seconds=TTL)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.stats()["size"] == 2
    cache_harness.age(PAST_TTL)
    assert cache.stats()["size"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_operations_match_an_lru_model(cache_harness: CacheHarness, seed: int) -> None:
    """No ageing here (the TTL is far away), so the cache must behave as a plain LRU."""
    max_size = 4
    cache = cache_harness.make(max_size=max_size, ttl_seconds=300)
    model: OrderedDict[str, str] = OrderedDict()
    hits = misses = 0
    rng = random.Random(seed)
    for step in range(150):
        key = f"k{rng.randrange(8)}"
        if rng.random() < 0.5:
            value = f"v{step}"
            cache.put(key, value)
            if key not in model and len(model) >= max_size:
                model.popitem(last=False)
            model[key] = value
            model.move_to_end(key)
        else:
            expected = model.get(key)
            if expected is None:
                misses += 1
            else:
                hits += 1
                model.move_to_end(key)
            assert cache.get(key) == expected, f"step {step}"
        stats = cache.stats()
        assert stats["size"] == len(model) <= max_size, f"step {step}"
    assert (stats["hits"], stats["misses"]) == (hits, misses)


def test_hit_rate_is_zero_percent_before_any_request(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    cache.put("a", "A")  # a put is not a request
    assert cache.stats()["hit_rate"] == "0%"


@pytest.mark.parametrize(
    ("hits", "misses", "expected"),
    [(3, 4, "42.9%"), (21, 29, "42.0%"), (1, 0, "100.0%"), (0, 2, "0.0%")],
)
def test_hit_rate_has_one_decimal(
    cache_harness: CacheHarness, hits: int, misses: int, expected: str
) -> None:
    cache = cache_harness.make()
    cache.put("hit", "H")
    for _ in range(hits):
        assert cache.get("hit") == "H"
    for _ in range(misses):
        assert cache.get("miss") is None
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["hit_rate"]) == (hits, misses, expected)


def test_clear_empties_entries_and_keeps_counters(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"
    assert cache.get("z") is None
    cache.clear()
    assert cache.stats()["size"] == 0
    assert cache.get("a") is None
    assert cache.get("b") is None
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 3, "25.0%")
    cache.put("a", "A2")  # still usable after clear
    assert cache.get("a") == "A2"


def test_stats_keys_and_configured_values(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make(max_size=7, ttl_seconds=300)
    stats = cache.stats()
    # Backends may add keys (e.g. ``errors``); these six are always there.
    assert {"size", "max_size", "hits", "misses", "hit_rate", "ttl_sec"} <= set(stats)
    assert stats["max_size"] == 7
    assert stats["ttl_sec"] == 300
    assert (stats["size"], stats["hits"], stats["misses"]) == (0, 0, 0)
    assert cache.max_size == 7
    assert cache.ttl_seconds == 300


def test_defaults(cache_harness: CacheHarness) -> None:
    stats = cache_harness.make().stats()
    assert (stats["max_size"], stats["ttl_sec"]) == (256, 300)


def test_make_key_normalises_the_query(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    expected = hashlib.md5(b"what is rag?", usedforsecurity=False).hexdigest()
    assert cache.make_key("  What is RAG?\n") == expected
    assert cache.make_key("what is rag?") == expected
    assert cache.make_key("What is RAG?") == make_key("What is RAG?")


def test_make_key_sorts_filters_and_ignores_empty_ones(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    assert cache.make_key("q", {}) == cache.make_key("q") == cache.make_key("q", None)
    with_filters = cache.make_key("q", {"b": 2, "a": 1})
    assert with_filters == cache.make_key("q", {"a": 1, "b": 2})
    material = "q" + str([("a", 1), ("b", 2)])
    assert with_filters == hashlib.md5(material.encode(), usedforsecurity=False).hexdigest()
    assert with_filters != cache.make_key("q")
    assert cache.make_key("q", {"a": 1}) != cache.make_key("q", {"a": 2})


@pytest.mark.parametrize(
    "value",
    [
        "",
        "مرحبا بالعالم — السياق",
        "emoji 🧠🚀👩🏽‍💻 and flags 🇸🇦",
        "line one\nline two\r\n\ttabbed\n",
        'quotes " \' \\ and {"json": [1, 2]}',
        "nul \x00 and bidi \u200f\u202e marks",
        "x" * 20_000,
    ],
)
def test_unicode_values_round_trip_exactly(cache_harness: CacheHarness, value: str) -> None:
    cache = cache_harness.make()
    key = cache.make_key("سؤال " + value[:10])
    cache.put(key, value)
    got = cache.get(key)
    assert got == value
    assert type(got) is str


def test_non_text_value_is_refused(cache_harness: CacheHarness) -> None:
    cache = cache_harness.make()
    for bad in (b"bytes", 42, None, ["list"]):
        with pytest.raises(ValidationError) as info:
            cache.put("k", bad)
        assert info.value.field == "context"
    assert cache.get("k") is None
