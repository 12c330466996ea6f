"""A server holds one set of database connections however many namespaces it answers.

Each namespace's store borrows the home store's SQL pool, driver pool and Redis client; a
store (and its pools) per namespace would grow the server's connections with every tenant
until PostgreSQL refused new clients.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.interfaces.service.conftest import drop_schema, postgres_schema_url
from tests.interfaces.service.server import Server

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

POSTGRES_PORT = 5432
NAMESPACES = 12


def postgres_connections(pid: int) -> int:
    """The TCP connections process ``pid`` holds to PostgreSQL's port (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == POSTGRES_PORT and fields[9] in inodes:
                count += 1
    return count


def test_more_namespaces_open_no_more_connections(
    tmp_path: Path, postgres_server_url: str, redis_url: str
) -> None:
    schema, url = postgres_schema_url(postgres_server_url)
    server = Server(tmp_path, url, redis_url)
    server.start()
    try:
        assert server.process is not None

        def run_in(namespace: str) -> None:
            with server.client(server.key(namespace, "admin")) as http:
                response = http.post("/v1/run", json={"query": "how do I fail over postgres"})
                assert response.status_code == 200, response.text
                assert http.get("/v1/metrics/report").status_code == 200

        run_in(f"home-{uuid.uuid4().hex[:8]}")
        one_namespace = postgres_connections(server.process.pid)
        assert one_namespace > 0
        for _ in range(2 * NAMESPACES):
            run_in(f"tenant-{uuid.uuid4().hex[:8]}")
        # A store (and its pools) per namespace would add at least one connection each, 24
        # here. The shared pool may hold a few more than one namespace needed: each new
        # namespace's first search starts its local index's build beside the requests
        # (decision 0098), and the pool keeps what that concurrency opened.
        assert postgres_connections(server.process.pid) < one_namespace + NAMESPACES
    finally:
        server.stop()
        drop_schema(postgres_server_url, schema)
