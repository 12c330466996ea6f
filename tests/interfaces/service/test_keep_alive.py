"""The server keeps an idle connection open longer than a pooling client reuses one.

httpx reuses a pooled connection for up to 5 s of idleness; a server closing at 5 s closes
connections while clients send on them, and under load requests failed with a reset.
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import pytest

from contextstore.interfaces.cli.serve import KEEP_ALIVE_SECONDS
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

CLIENT_REUSE_SECONDS = 5.0  # httpx's default keepalive_expiry


def test_a_connection_idle_as_long_as_a_client_reuses_one_still_answers(tmp_path: Path) -> None:
    assert KEEP_ALIVE_SECONDS > 2 * CLIENT_REUSE_SECONDS
    server = Server(tmp_path, f"sqlite:///{tmp_path / 'store.db'}")
    server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        first.read()
        assert first.status == 200
        # Idle past uvicorn's 5 s default: the same socket must still be served.
        time.sleep(CLIENT_REUSE_SECONDS + 1.5)
        connection.request("GET", "/healthz")
        again = connection.getresponse()
        again.read()
        assert again.status == 200
        connection.close()
    finally:
        server.stop()
