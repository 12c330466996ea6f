"""client_from_url (schemes, passwords, TLS, cluster, bad URLs) and the FaultPolicy."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from contextstore.backends.redis import client as client_module
from contextstore.backends.redis.client import FaultPolicy, client_from_url, hide_password
from contextstore.errors import BackendUnavailableError, ConfigurationError
from tests.harness import FakeClock
from tests.redis_cluster import free_port


def pool_kwargs(client: redis.Redis) -> dict[str, Any]:
    return dict(client.connection_pool.connection_kwargs)


def test_plain_url_gets_short_timeouts_and_one_quick_retry() -> None:
    client = client_from_url("redis://cache.internal:6380/2")
    assert isinstance(client, redis.Redis)
    kwargs = pool_kwargs(client)
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache.internal", 6380, 2)
    assert kwargs["socket_connect_timeout"] == 0.5
    assert kwargs["socket_timeout"] == 1.0
    assert kwargs["retry"].get_retries() == 1


def test_options_win_over_defaults() -> None:
    client = client_from_url("redis://localhost", socket_timeout=5.0, decode_responses=True)
    kwargs = pool_kwargs(client)
    assert kwargs["socket_timeout"] == 5.0
    assert kwargs["decode_responses"] is True


def test_password_and_user_in_the_url() -> None:
    client = client_from_url("redis://agent:p%40ss%3Aword@localhost:6379/0")
    kwargs = pool_kwargs(client)
    assert (kwargs["username"], kwargs["password"]) == ("agent", "p@ss:word")
    only_password = pool_kwargs(client_from_url("redis://:secret@localhost"))
    assert only_password["password"] == "secret"


def test_rediss_means_tls() -> None:
    client = client_from_url("rediss://:secret@cache.example:6380/0")
    assert issubclass(client.connection_pool.connection_class, redis.SSLConnection)
    assert not issubclass(
        client_from_url("redis://localhost").connection_pool.connection_class, redis.SSLConnection
    )


def test_unix_socket_url() -> None:
    client = client_from_url("unix:///run/redis/redis.sock?db=3")
    assert issubclass(client.connection_pool.connection_class, redis.UnixDomainSocketConnection)
    assert pool_kwargs(client)["path"] == "/run/redis/redis.sock"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://localhost:6379", "unknown scheme"),
        ("memory://", "unknown scheme"),
        ("localhost:6379", "unknown scheme"),
        ("", "unknown scheme"),
        ("redis://", "no host"),
        ("redis://:6379", "no host"),
        ("redis://localhost:notaport", "bad port"),
        ("redis://localhost:99999", "bad port"),
        ("redis://localhost:0", "bad port"),
        ("redis://localhost/cache", "not a number"),
        ("redis://localhost/0?socket_timeout=soon", "socket_timeout"),
        ("redis+cluster://localhost:7000/1", "only database 0"),
        ("redis+cluster://", "no host"),
        ("redis+cluster://localhost:7000,:7001", "no host"),
        ("redis+cluster://localhost:x", "bad port"),
    ],
)
def test_bad_urls_raise_configuration_error(url: str, reason: str) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        client_from_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:hunter2@localhost:bad",
        "redis://:hunter2@localhost/db",
        "rediss+cluster://:hunter2@h:7000/5",
        "ftp://:hunter2@localhost",
    ],
)
def test_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        client_from_url(url)
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value)


def test_hide_password() -> None:
    assert hide_password("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert hide_password("redis://:pw@h") == "redis://:***@h"
    assert hide_password("redis://h:1/0") == "redis://h:1/0"
    assert hide_password("rediss+cluster://:pw@a:1,b:2") == "rediss+cluster://:***@a:1,b:2"


def test_cluster_url_is_parsed_into_seed_nodes_tls_and_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    captured: dict[str, Any] = {}

    def fake_cluster(**kwargs: Any) -> str:
        captured.update(kwargs)
        return "cluster"

    monkeypatch.setattr(client_module, "RedisCluster", fake_cluster)
    assert client_from_url("rediss+cluster://agent:pw@h1:7000,h2:7001/0") == "cluster"
    nodes = [(node.host, node.port) for node in captured.pop("startup_nodes")]
    assert nodes == [("h1", 7000), ("h2", 7001)]
    assert captured["ssl"] is True
    assert (captured["username"], captured["password"]) == ("agent", "pw")
    assert captured["socket_connect_timeout"] == 0.5
    assert "db" not in captured
    captured.clear()
    client_from_url("redis+cluster://h1", socket_timeout=3)
    assert [(n.host, n.port) for n in captured["startup_nodes"]] == [("h1", 6379)]
    assert "ssl" not in captured
    assert captured["socket_timeout"] == 3


def test_unreachable_cluster_raises_backend_unavailable() -> None:
    url = f"redis+cluster://:hunter2@127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailableError) as info:
        client_from_url(url)
    assert "hunter2" not in str(info.value)


def test_cluster_url_reaches_the_real_cluster(redis_cluster_client: RedisCluster) -> None:
    ports = sorted(node.port for node in redis_cluster_client.get_primaries())
    client = client_from_url(f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}")
    try:
        assert isinstance(client, RedisCluster)
        assert client.ping()
        assert len(client.get_primaries()) == 3
    finally:
        client.close()


# --- FaultPolicy -------------------------------------------------------------------------


class Flaky:
    """An operation that fails while ``down`` is set, counting its calls."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.down:
            raise redis.ConnectionError("Connection refused")
        return "redis"


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING]


def test_fault_policy_falls_back_counts_and_pauses(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="contextstore.backends.redis")
    clock = FakeClock()
    policy = FaultPolicy(1.0, clock=clock)
    operation = Flaky()
    assert policy.call(operation, lambda: "local", "op") == "redis"
    operation.down = True
    assert policy.call(operation, lambda: "local", "op") == "local"
    assert (policy.errors, policy.down, operation.calls) == (1, True, 2)
    for _ in range(10):  # inside the cool-down Redis is not touched at all
        assert policy.call(operation, lambda: "local", "op") == "local"
        clock.advance(0.09)
    assert (operation.calls, policy.errors) == (2, 1)
    clock.advance(0.2)  # 1.1 s after the failure: one new attempt, failing again
    assert policy.call(operation, lambda: "local", "op") == "local"
    assert (operation.calls, policy.errors) == (3, 2)
    assert len(warnings_in(caplog)) == 2
    assert "Connection refused" in warnings_in(caplog)[0].getMessage()
    clock.advance(1.0)
    operation.down = False
    assert policy.call(operation, lambda: "local", "op") == "redis"
    assert (policy.down, policy.errors) == (False, 2)
    assert [r.levelno for r in caplog.records].count(logging.INFO) == 1


def test_fault_policy_warns_at_most_once_per_interval_even_when_flapping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="contextstore.backends.redis")
    clock = FakeClock()
    policy = FaultPolicy(1.0, clock=clock)
    operation = Flaky()
    for step in range(100):  # 10 s; Redis flips every 0.3 s
        operation.down = (step // 3) % 2 == 0
        policy.call(operation, lambda: "local", "op")
        clock.advance(0.1)
    assert policy.errors >= 5
    assert 1 <= len(warnings_in(caplog)) <= 10


def test_concurrent_failures_log_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="contextstore.backends.redis")
    policy = FaultPolicy(60.0)
    barrier = threading.Barrier(8)

    def failing() -> None:
        barrier.wait(timeout=5)  # all eight threads are inside Redis when the errors arrive
        raise redis.TimeoutError("Timeout reading from socket")

    threads = [
        threading.Thread(target=policy.call, args=(failing, lambda: None, "op")) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert policy.errors == 8
    assert len(warnings_in(caplog)) == 1


def test_fault_policy_with_zero_interval_retries_every_call() -> None:
    policy = FaultPolicy(0, clock=FakeClock())
    operation = Flaky()
    operation.down = True
    for _ in range(5):
        policy.call(operation, lambda: None, "op")
    assert operation.calls == policy.errors == 5


def test_fault_policy_lets_other_errors_through() -> None:
    policy = FaultPolicy(clock=FakeClock())

    def broken() -> None:
        raise KeyError("a bug, not an outage")

    with pytest.raises(KeyError):
        policy.call(broken, lambda: None, "op")
    assert policy.errors == 0


@pytest.mark.parametrize("bad", [-1, float("nan"), "1", True])
def test_fault_policy_refuses_bad_intervals(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="retry_interval"):
        FaultPolicy(bad)
