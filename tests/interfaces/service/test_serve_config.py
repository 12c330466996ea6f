"""``contextstore serve`` and its workers read contextstore.toml from the working directory;
its flags win over the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.interfaces.service.server import Server


@pytest.mark.slow
def test_serve_and_its_workers_take_the_file_s_settings_under_the_flags(tmp_path: Path) -> None:
    # The port is the file's too, but the test's --port flag wins (else no answer there).
    (tmp_path / "contextstore.toml").write_text(
        "[service]\nport = 1\nmax_body_bytes = 1000\n", encoding="utf-8"
    )
    server = Server(tmp_path, f"sqlite:///{tmp_path / 'store.db'}", workers=2)
    server.start()
    try:
        key = server.key("configured", "agent")
        with server.client(key) as client:
            small = client.post("/v1/run", json={"query": "q" * 500})
            large = client.post("/v1/run", json={"query": "q" * 1200})
        assert small.status_code == 200, small.text
        assert large.status_code == 413, large.text
    finally:
        assert server.stop() == 0, server.log.read_text()
