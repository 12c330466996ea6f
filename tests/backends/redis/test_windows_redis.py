"""RedisWindows beyond the shared contract: stored format, precision, planted data,
namespaces, the process-local fallback, script reloading."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
import redis

from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.redis.client import FaultPolicy
from contextstore.backends.redis.keys import NamespaceKeys
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.windows import EMPTY_SUMMARY, WINDOW, Sample, WindowSummary
from tests.backends.redis import drop_namespace, make_client, namespace_keys
from tests.harness import FakeClock
from tests.redis_cluster import RedisServer, free_port


def doubles(*values: float) -> bytes:
    """The stored form of samples and sums: little-endian IEEE 754 doubles."""
    return struct.pack(f"<{len(values)}d", *values)


def test_samples_and_sums_are_binary_doubles_under_the_schema(client: Any, namespace: str) -> None:
    windows = RedisWindows(client, namespace=namespace)
    windows.record(Sample(12.5, 300, 4, guard_passed=False))
    windows.record(Sample(0.1 + 0.2, 100, 0, guard_passed=True))
    keys = NamespaceKeys.of(namespace)
    assert namespace_keys(client, namespace) == {keys.windows}
    assert client.hgetall(keys.windows) == {
        b"0": doubles(12.5, 300, 4, 1),
        b"1": doubles(0.1 + 0.2, 100, 0, 0),
        b"agg": doubles(2, 2, 12.5 + (0.1 + 0.2), 400, 4, 1),
    }


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1e-310, 1.7976931348623157e308, math.inf],
)
def test_every_double_is_stored_bit_for_bit(client: Any, namespace: str, value: float) -> None:
    # fakeredis has no struct library: the script packs these bytes itself there.
    windows = RedisWindows(client, namespace=namespace)
    windows.record(Sample(value, 1, 1, True))
    stored = client.hgetall(NamespaceKeys.of(namespace).windows)
    assert stored[b"0"] == doubles(value, 1, 1, 0)
    assert stored[b"agg"] == doubles(1, 1, 0.0 + value, 1, 1, 0)  # the sum starts at 0


def test_the_ring_never_holds_more_than_the_window(client: Any, namespace: str) -> None:
    windows = RedisWindows(client, namespace=namespace)
    for i in range(WINDOW + 7):
        windows.record(Sample(float(i), i, 1, True))
    stored = client.hgetall(NamespaceKeys.of(namespace).windows)
    assert len(stored) == WINDOW + 1  # the ring and agg
    assert stored[b"6"] == doubles(106.0, 106, 1, 0)  # record 107 overwrote record 7's slot


def test_a_decoding_client_reads_the_binary_summary(
    request: pytest.FixtureRequest, client: Any, namespace: str
) -> None:
    decoding = make_client(request, request.node.callspec.params["client"], decode_responses=True)
    try:
        windows = RedisWindows(decoding, namespace=namespace)
        windows.record(Sample(1.0, 10, 1, True))
        summary = windows.record(Sample(2.0, 30, 3, False))
        assert summary == WindowSummary(2, 2, 1.5, 20.0, 2.0, 0.5)
        assert windows.summary() == summary
    finally:
        drop_namespace(decoding, namespace)
        decoding.close()


def test_means_track_memory_windows_over_many_random_floats(client: Any, namespace: str) -> None:
    shared, local = RedisWindows(client, namespace=namespace), MemoryWindows()
    rng = random.Random(7)
    for step in range(1, 451):
        sample = Sample(
            rng.uniform(0, 5000) ** rng.choice([1, 0.5]),
            rng.randrange(9000),
            rng.randrange(20),
            rng.random() < 0.2,
        )
        got, expected = shared.record(sample), local.record(sample)
        assert (got.total_queries, got.samples) == (expected.total_queries, expected.samples)
        assert got.avg_response_ms == pytest.approx(expected.avg_response_ms, rel=1e-12)
        assert (got.avg_context_length, got.avg_chunk_count, got.guard_failure_rate) == (
            expected.avg_context_length,
            expected.avg_chunk_count,
            expected.guard_failure_rate,
        ), step


def test_response_times_keep_full_precision(client: Any, namespace: str) -> None:
    windows = RedisWindows(client, namespace=namespace)
    value = 0.1 + 0.2  # 0.30000000000000004: lost if written with 14 digits
    assert windows.record(Sample(value, 1, 1, True)).avg_response_ms == value


def test_non_finite_response_times_wash_out(client: Any, namespace: str) -> None:
    windows = RedisWindows(client, namespace=namespace)
    assert math.isinf(windows.record(Sample(float("inf"), 1, 1, True)).avg_response_ms)
    for _ in range(WINDOW):
        summary = windows.record(Sample(3.0, 1, 1, True))
    assert summary.avg_response_ms == 3.0


@pytest.mark.parametrize(
    "planted",
    [
        {"agg": b"\xff\x80 garbage"},
        {"agg": b"5 1 x"},
        {"agg": b"inf nan 1 1 1 1"},
        {"agg": b"-1e999 1 1 1 1 1"},
        {"agg": b"3 3 nan 1 1 1", "0": b"1 2", "1": b"nan nan nan nan", "2": b"\xff"},
        {"agg": b"200 100 1 1 1 1", "99": b"1e400 -5 x 1"},
        {"agg": doubles(math.inf, math.nan, 1, 1, 1, 1)},
        {"agg": doubles(-1, 1, 1, 1, 1, 1)},
        {"agg": doubles(2.5, 1, 1, 1, 1, 1)},
        {"agg": doubles(3, 3, math.nan, 1, 1, 1), "0": b"1 2", "1": doubles(*[math.nan] * 4)},
        {"agg": doubles(200, 100, 1, 1, 1, 1), "99": doubles(math.inf, -5, math.nan, 1)},
        {"agg": doubles(1e300, 1e300, 1, 1, 1, 1), "5": doubles(1, 1, 1, 1) + b"x"},
    ],
)
def test_planted_garbage_never_raises(
    client: Any, namespace: str, planted: dict[str, bytes]
) -> None:
    client.hset(NamespaceKeys.of(namespace).windows, mapping=planted)
    windows = RedisWindows(client, namespace=namespace)
    windows.summary()
    for _ in range(WINDOW + 1):
        summary = windows.record(Sample(10.0, 10, 1, True))
    assert summary.samples == WINDOW
    assert summary.avg_response_ms == 10.0
    assert windows.fault.errors == 0


def test_namespaces_never_see_each_other(client: Any, namespace: str) -> None:
    other = namespace + "_other"
    try:
        first = RedisWindows(client, namespace=namespace)
        second = RedisWindows(client, namespace=other)
        first.record(Sample(10.0, 100, 1, True))
        assert second.summary() == EMPTY_SUMMARY
        assert second.record(Sample(30.0, 300, 3, False)).total_queries == 1
        second.clear()
        assert first.summary() == WindowSummary(1, 1, 10.0, 100.0, 1.0, 0.0)
    finally:
        drop_namespace(client, other)


def test_unreachable_redis_falls_back_to_local_windows(caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=None)
    clock = FakeClock()
    windows = RedisWindows(client, namespace="down", fault=FaultPolicy(1.0, clock=clock))
    totals = []
    for _ in range(3):
        totals.append(windows.record(Sample(5.0, 50, 1, True)).total_queries)
        clock.advance(0.6)  # so a Redis attempt is made on every other call
    assert totals == [1, 2, 3]
    assert windows.summary() == WindowSummary(3, 3, 5.0, 50.0, 1.0, 0.0)
    assert windows.fault.errors == 2
    windows.clear()
    assert windows.summary() == EMPTY_SUMMARY
    client.close()


def test_local_samples_are_dropped_when_redis_answers_again(own_redis_server: RedisServer) -> None:
    client = redis.Redis(port=own_redis_server.port, socket_connect_timeout=0.2, retry=None)
    clock = FakeClock()
    windows = RedisWindows(client, namespace="resume", fault=FaultPolicy(1.0, clock=clock))
    assert windows.record(Sample(1.0, 1, 1, True)).total_queries == 1
    own_redis_server.kill()
    assert windows.record(Sample(2.0, 2, 2, True)) == WindowSummary(1, 1, 2.0, 2.0, 2.0, 0.0)
    own_redis_server.start()  # empty again: nothing was saved
    clock.advance(1.0)
    assert windows.record(Sample(3.0, 3, 3, True)) == WindowSummary(1, 1, 3.0, 3.0, 3.0, 0.0)
    client.close()
    other = redis.Redis(port=own_redis_server.port)
    own_redis_server.kill()
    other.close()
    clock.advance(1.0)
    # the next outage starts from an empty local window, not from the old local samples
    assert windows.record(Sample(4.0, 4, 4, True)) == WindowSummary(1, 1, 4.0, 4.0, 4.0, 0.0)


def test_record_script_reloads_after_script_flush(own_redis_server: RedisServer) -> None:
    client = redis.Redis(port=own_redis_server.port)
    try:
        windows = RedisWindows(client, namespace="flush")
        windows.record(Sample(1.0, 1, 1, True))
        client.script_flush()
        assert windows.record(Sample(3.0, 3, 3, True)) == WindowSummary(2, 2, 2.0, 2.0, 2.0, 0.0)
        assert windows.fault.errors == 0
    finally:
        client.close()


def test_from_url_owns_its_client(redis_url: str, namespace: str) -> None:
    with RedisWindows.from_url(redis_url, namespace=namespace) as windows:
        try:
            assert windows.record(Sample(1.0, 1, 1, True)).total_queries == 1
            assert repr(windows) == f"RedisWindows(namespace={namespace!r})"
        finally:
            drop_namespace(windows.client, namespace)
