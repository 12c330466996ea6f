"""Pytest plugin: Redis servers the test run starts itself, on free loopback ports.

- ``redis_cluster_client`` (session): a real three-master Redis Cluster (no replicas) and a
  ``redis.cluster.RedisCluster`` client for it; the servers are stopped at the end.
- ``own_redis_server`` (function): a standalone server of this test's own, for tests that
  must kill it, restart it or run ``SCRIPT FLUSH`` — never done to a shared server.

Servers run with ``--save "" --appendonly no`` in a temporary directory. When
``redis-server`` / ``redis-cli`` are missing the fixtures skip locally, but fail when
``CONTEXTSTORE_TEST_REDIS_URL`` is set (CI must never pass by skipping).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REDIS_ENV = "CONTEXTSTORE_TEST_REDIS_URL"
CLUSTER_BUS_OFFSET = 10000  # Redis Cluster's node-to-node bus listens on port + 10000
START_TIMEOUT = 10.0


def _binary(name: str) -> str | None:
    fallback = f"/usr/bin/{name}"
    return shutil.which(name) or (fallback if os.path.exists(fallback) else None)


def require_redis_binaries() -> tuple[str, str]:
    """Paths of redis-server and redis-cli; skip (locally) or fail (CI) when missing."""
    server, cli = _binary("redis-server"), _binary("redis-cli")
    if server is None or cli is None:
        message = "redis-server and redis-cli are needed to start test servers"
        if os.environ.get(REDIS_ENV):
            pytest.fail(f"{message} ({REDIS_ENV} is set, so this must not be skipped)")
        pytest.skip(message)
    return server, cli


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, cluster: bool = False) -> int:
    """A loopback port nobody listens on (and, for cluster nodes, whose bus port is free)."""
    for _ in range(200):
        port = random.randint(20000, 55000)  # + 10000 stays below 65536
        if _port_free(port) and (not cluster or _port_free(port + CLUSTER_BUS_OFFSET)):
            return port
    raise RuntimeError("no free loopback port found")


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port``, data only in ``directory``."""

    def __init__(self, directory: Path, port: int, *, cluster: bool = False) -> None:
        self.directory = directory
        self.port = port
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers PING (the port may be reused)."""
        server, _ = require_redis_binaries()
        args = [
            server,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.directory / "nodes.conf"),
                "--cluster-node-timeout", "5000",
            ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.02)
        self.stop()
        log = self.directory / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{tail}")

    def ping(self) -> bool:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, socket_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-stream, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=START_TIMEOUT)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the server hangs, its sockets open but never answering."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=START_TIMEOUT)
        self.process = None


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A started standalone server private to this test; stopped afterwards."""
    require_redis_binaries()
    server = RedisServer(tmp_path / "redis", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _wait_cluster_ok(servers: list[RedisServer]) -> None:
    import redis

    deadline = time.monotonic() + 30.0
    pending = list(servers)
    while pending and time.monotonic() < deadline:
        server = pending[0]
        client = redis.Redis(port=server.port, socket_timeout=1)
        try:
            info = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = info.decode() if isinstance(info, bytes) else str(info)
        if "cluster_state:ok" in text:
            pending.pop(0)
        else:
            time.sleep(0.05)
    if pending:
        raise RuntimeError(f"Redis Cluster did not reach cluster_state:ok (port {pending[0].port})")


@pytest.fixture(scope="session")
def redis_cluster_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A ``RedisCluster`` client for a three-master cluster this run starts on loopback."""
    _, cli = require_redis_binaries()
    from redis.cluster import RedisCluster

    root = tmp_path_factory.mktemp("redis-cluster")
    servers: list[RedisServer] = []
    client: RedisCluster | None = None
    try:
        for index in range(3):
            server = RedisServer(root / f"node{index}", free_port(cluster=True), cluster=True)
            servers.append(server)
            server.start()
        nodes = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        _wait_cluster_ok(servers)
        client = RedisCluster(
            host="127.0.0.1", port=servers[0].port, socket_connect_timeout=1, socket_timeout=2
        )
        yield client
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        for server in servers:
            server.stop()


__all__ = ["RedisServer", "free_port", "own_redis_server", "redis_cluster_client"]
