"""``contextstore cache stats|clear`` and ``contextstore adaptive report`` against real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.windows import Sample
from contextstore.interfaces.cli import app
from tests.backends.redis import drop_namespace
from tests.redis_cluster import free_port


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> CliRunner:
    for name in ("CONTEXTSTORE_REDIS_URL", "CONTEXTSTORE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONTEXTSTORE_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return CliRunner()


@pytest.fixture
def client(redis_url: str, namespace: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        drop_namespace(client, namespace)
        client.close()


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


def test_cache_stats_shows_the_namespace_figures(
    runner: CliRunner, client: redis.Redis, redis_url: str, namespace: str
) -> None:
    cache = RedisContextCache(client, namespace=namespace)
    cache.put("a", "A")
    cache.get("a")
    cache.get("b")
    result = invoke(
        runner, "cache", "stats", "--redis-url", redis_url, "--namespace", namespace, "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "namespace": namespace,
        "backend": "redis",
        "redis_url": redis_url,
        "size": 1,
        "max_size": 256,
        "hits": 1,
        "misses": 1,
        "hit_rate": "50.0%",
        "ttl_sec": 300,
        "hit_ratio": 0.5,
    }
    result = invoke(runner, "cache", "stats", "--redis-url", redis_url, "--namespace", namespace)
    assert result.exit_code == 0, result.output
    assert f"namespace {namespace}" in result.stdout
    assert "hit rate" in result.stdout and "50.0%" in result.stdout


def test_cache_clear_empties_entries_and_keeps_counters(
    runner: CliRunner, client: redis.Redis, redis_url: str, namespace: str
) -> None:
    cache = RedisContextCache(client, namespace=namespace)
    for key in "abc":
        cache.put(key, key)
    cache.get("a")
    result = invoke(
        runner, "cache", "clear", "--redis-url", redis_url, "--namespace", namespace, "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cleared"] == 3
    assert cache.get("b") is None
    assert (cache.stats()["size"], cache.stats()["hits"], cache.stats()["misses"]) == (0, 1, 1)
    result = invoke(runner, "cache", "clear", "--redis-url", redis_url, "--namespace", namespace)
    assert result.exit_code == 0 and "cleared 0 entries" in result.stdout, result.output


def test_adaptive_report_shows_the_fleet_windows(
    runner: CliRunner, client: redis.Redis, redis_url: str, namespace: str
) -> None:
    windows = RedisWindows(client, namespace=namespace)
    windows.record(Sample(100.0, 400, 2, True))
    windows.record(Sample(300.0, 600, 4, False))
    args = ["adaptive", "report", "--redis-url", redis_url, "--namespace", namespace]
    result = invoke(runner, *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "namespace": namespace,
        "backend": "redis",
        "redis_url": redis_url,
        "runs": 2,
        "samples": 2,
        "mean_response_ms": 200.0,
        "mean_context_length": 500.0,
        "mean_chunk_count": 3.0,
        "guard_failure_rate": 0.5,
    }
    result = invoke(runner, *args)
    assert result.exit_code == 0, result.output
    assert "50.0%" in result.stdout and "mean_response_ms" in result.stdout


def test_the_environment_names_redis_and_namespace(
    runner: CliRunner,
    client: redis.Redis,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTSTORE_REDIS_URL", redis_url)
    monkeypatch.setenv("CONTEXTSTORE_NAMESPACE", namespace)
    RedisContextCache(client, namespace=namespace).put("k", "v")
    result = invoke(runner, "cache", "stats", "--json")
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["namespace"], json.loads(result.stdout)["size"]) == (
        namespace,
        1,
    )


def test_without_redis_the_commands_say_there_is_nothing_shared(runner: CliRunner) -> None:
    for args in (["cache", "stats"], ["cache", "clear"], ["adaptive", "report"]):
        result = invoke(runner, *args)
        assert result.exit_code == 0, result.output
        assert "no Redis URL" in result.stdout
    result = invoke(runner, "cache", "stats", "--json")
    assert json.loads(result.stdout)["backend"] == "memory"


@pytest.mark.parametrize("args", [["cache", "stats"], ["cache", "clear"], ["adaptive", "report"]])
def test_unreachable_redis_is_one_error_line_and_status_1(
    runner: CliRunner, args: list[str]
) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    result = invoke(runner, *args, "--redis-url", url)
    assert result.exit_code == 1
    assert "unreachable" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("args", [["cache", "stats"], ["cache", "clear"], ["adaptive", "report"]])
def test_unreachable_redis_prints_exactly_the_error_line(args: list[str], tmp_path: Any) -> None:
    """A real process on a port nobody listens on: stderr is the one ``error:`` line (no
    WARNING from the client before it, no traceback), secrets masked, exit status 1."""
    port = free_port()
    url = f"redis://:hunter2@127.0.0.1:{port}/0?password=hunter3"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CONTEXTSTORE_REDIS_URL", "CONTEXTSTORE_NAMESPACE")
    }
    env["CONTEXTSTORE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", *args, "--redis-url", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"error: Redis at redis://:***@127.0.0.1:{port}/0?password=*** is unreachable; "
        "nothing was read or changed\n"
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--redis-url", "http://:hunter2@localhost"], "unknown scheme"),
        (["--redis-url", "redis://localhost/abc"], "not a number"),
        (["--namespace", "a{b}"], "namespace"),
    ],
)
def test_bad_settings_are_one_error_line(
    runner: CliRunner, redis_url: str, args: list[str], named: str
) -> None:
    if "--redis-url" not in args:
        args = [*args, "--redis-url", redis_url]
    result = invoke(runner, "cache", "stats", *args)
    assert result.exit_code == 1
    assert named in result.stderr and "hunter2" not in result.stderr
    assert "Traceback" not in result.output
