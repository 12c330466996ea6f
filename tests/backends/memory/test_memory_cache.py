"""MemoryContextCache cases that need the fake clock or threads
(docs/design/cache-and-windows.md)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.backends.memory.cache import MemoryContextCache
from contextstore.errors import ValidationError
from tests.harness import FakeClock


def make(max_size: int = 256, ttl_seconds: float = 300) -> tuple[MemoryContextCache, FakeClock]:
    clock = FakeClock()
    return MemoryContextCache(max_size=max_size, ttl_seconds=ttl_seconds, clock=clock), clock


@pytest.mark.parametrize("ttl", [300, 0.3, 0.1, 1e-3, 7.7])
def test_age_of_exactly_ttl_is_live_and_a_hair_more_is_expired(ttl: float) -> None:
    cache, clock = make(ttl_seconds=ttl)
    cache.put("a", "A")
    clock.advance(ttl)
    assert cache.get("a") == "A"
    clock.advance(1e-6)
    assert cache.get("a") is None


def test_a_get_refreshes_recency_but_not_age() -> None:
    cache, clock = make(ttl_seconds=10)
    cache.put("a", "A")
    clock.advance(6)
    assert cache.get("a") == "A"
    clock.advance(6)
    assert cache.get("a") is None


def test_the_injected_clock_is_the_only_time_source() -> None:
    now = [50.0]
    cache = MemoryContextCache(ttl_seconds=5, clock=lambda: now[0])
    cache.put("a", "A")
    time.sleep(0.01)  # wall time passing changes nothing
    assert cache.get("a") == "A"
    now[0] = 55.5
    assert cache.get("a") is None


def test_default_clock_is_monotonic() -> None:
    cache = MemoryContextCache(ttl_seconds=0.05)
    cache.put("a", "A")
    assert cache.get("a") == "A"
    time.sleep(0.08)
    assert cache.get("a") is None


def test_stats_has_exactly_the_contract_keys() -> None:
    cache, _ = make(max_size=5, ttl_seconds=2.5)
    assert cache.stats() == {
        "size": 0,
        "max_size": 5,
        "hits": 0,
        "misses": 0,
        "hit_rate": "0%",
        "ttl_sec": 2.5,
    }


def test_stats_drops_expired_entries_without_counting_misses() -> None:
    cache, clock = make(max_size=3, ttl_seconds=10)
    cache.put("a", "A")
    clock.advance(5)
    cache.put("b", "B")
    clock.advance(6)  # a: 11 s (expired), b: 6 s
    stats = cache.stats()
    assert (stats["size"], stats["hits"], stats["misses"]) == (1, 0, 0)
    clock.advance(5)
    assert cache.stats()["size"] == 0


def test_several_expired_entries_are_all_dropped_before_any_live_one() -> None:
    cache, clock = make(max_size=4, ttl_seconds=10)
    for key in "wx":
        cache.put(key, key)
    clock.advance(5)
    for key in "yz":
        cache.put(key, key)
    assert cache.get("w") == "w"  # recency order now x, y, z, w
    clock.advance(6)  # w and x expired; y and z live
    cache.put("n1", "n1")
    cache.put("n2", "n2")
    assert [cache.get(k) for k in ("y", "z", "n1", "n2")] == ["y", "z", "n1", "n2"]
    cache.put("n3", "n3")  # nothing expired now: the LRU live entry (y) goes
    assert cache.get("y") is None


def test_max_size_one() -> None:
    cache, _ = make(max_size=1)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") is None
    assert cache.get("b") == "B"
    assert cache.stats()["size"] == 1


def test_concurrent_puts_and_gets_keep_exact_counts() -> None:
    cache = MemoryContextCache(max_size=64, ttl_seconds=300)
    threads, gets_each = 8, 2000
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for i in range(gets_each):
                key = f"k{(worker * 7 + i) % 100}"
                cache.put(key, f"{worker}:{i}")
                value = cache.get(f"k{(worker + i * 3) % 100}")
                assert value is None or isinstance(value, str)
        except BaseException as exc:  # surfaced below: a thread's assertion is otherwise lost
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert errors == []
    stats = cache.stats()
    assert stats["size"] <= 64
    assert stats["hits"] + stats["misses"] == threads * gets_each
    assert stats["hits"] > 0


@pytest.mark.parametrize("max_size", [0, -1, 1.5, "3", True, None])
def test_bad_max_size_is_refused(max_size: Any) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryContextCache(max_size=max_size)
    assert info.value.field == "max_size"


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "300", True, None])
def test_bad_ttl_is_refused(ttl: Any) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryContextCache(ttl_seconds=ttl)
    assert info.value.field == "ttl_seconds"


def test_non_callable_clock_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        MemoryContextCache(clock=12.0)  # type: ignore[arg-type]
    assert info.value.field == "clock"


def test_refused_value_leaves_the_existing_entry_alone() -> None:
    cache, _ = make()
    cache.put("k", "kept")
    with pytest.raises(ValidationError):
        cache.put("k", 3)  # type: ignore[arg-type]
    assert cache.get("k") == "kept"


class ReferenceCache:
    """The contract spelled out as plainly as possible: put times and a recency list."""

    def __init__(self, max_size: int, ttl: float) -> None:
        self.max_size, self.ttl = max_size, ttl
        self.entries: OrderedDict[str, tuple[float, str]] = OrderedDict()

    def live(self, now: float, key: str) -> bool:
        return now - self.entries[key][0] <= self.ttl

    def get(self, now: float, key: str) -> str | None:
        if key not in self.entries:
            return None
        if not self.live(now, key):
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return self.entries[key][1]

    def put(self, now: float, key: str, value: str) -> None:
        if key not in self.entries and len(self.entries) >= self.max_size:
            for stale in [k for k in self.entries if not self.live(now, k)]:
                del self.entries[stale]
            if len(self.entries) >= self.max_size:
                self.entries.popitem(last=False)
        self.entries[key] = (now, value)
        self.entries.move_to_end(key)

    def size(self, now: float) -> int:
        return sum(self.live(now, k) for k in self.entries)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 9)),
        st.tuples(st.just("get"), st.integers(0, 9)),
        st.tuples(st.just("age"), st.integers(1, 6)),
        st.tuples(st.just("stats"), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=operations, max_size=st.integers(1, 6))
def test_matches_the_reference_model_with_ageing(ops: list[tuple[str, int]], max_size: int) -> None:
    cache, clock = make(max_size=max_size, ttl_seconds=10)  # integer times: exact arithmetic
    model = ReferenceCache(max_size, 10)
    for step, (op, arg) in enumerate(ops):
        now = clock()
        if op == "put":
            cache.put(f"k{arg}", f"v{step}")
            model.put(now, f"k{arg}", f"v{step}")
        elif op == "get":
            assert cache.get(f"k{arg}") == model.get(now, f"k{arg}")
        elif op == "age":
            clock.advance(arg)
        else:
            assert cache.stats()["size"] == model.size(now)
        assert len(cache._data) <= max_size
