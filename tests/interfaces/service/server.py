"""A real ``contextstore serve`` process on a free loopback port, and keys to call it with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contextstore.interfaces.apikeys import add_key, create_key_file
from contextstore.interfaces.sql_keys import SqlKeyStore
from tests.redis_cluster import free_port

START_TIMEOUT = 120.0
STARTED = "Application startup complete."
BIND_REFUSED = "address already in use"
BIND_ATTEMPTS = 3


@dataclass
class Server:
    """``contextstore serve`` with its own key file, or (``shared_keys``) with none, checking
    the database's keys; ``stop()`` sends SIGTERM and waits."""

    directory: Path
    database_url: str
    redis_url: str | None = None
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    shared_keys: bool = False
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def keys_file(self) -> Path:
        return self.directory / "keys.json"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def key(self, namespace: str, role: str = "agent") -> str:
        if self.shared_keys:
            store = SqlKeyStore(self.database_url)
            try:
                key, _ = store.add(namespace, role)
            finally:
                store.close()
            return key
        key, _ = add_key(self.keys_file, namespace, role)
        return key

    def environment(self) -> dict[str, str]:
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("CONTEXTSTORE_", "PROMETHEUS_"))
        }
        env["CONTEXTSTORE_DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["CONTEXTSTORE_REDIS_URL"] = self.redis_url
        if not self.shared_keys:
            env["CONTEXTSTORE_API_KEYS"] = str(self.keys_file)
        env.update(self.env)
        return env

    def start(self) -> None:
        # A port found free can be taken by another process before the server binds it.
        for _ in range(BIND_ATTEMPTS - 1):
            try:
                return self._start_once()
            except RuntimeError:
                if BIND_REFUSED not in self.log.read_text():
                    raise
                self.log.unlink()
        return self._start_once()

    def _start_once(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.shared_keys:
            create_key_file(self.keys_file)  # a server refuses to start without one
        self.port = free_port()
        command = [
            sys.executable, "-m", "contextstore", "serve",
            "--port", str(self.port), "--workers", str(self.workers),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=self.environment(), stdout=log, stderr=log, cwd=self.directory
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited at start:\n{self.log.read_text()}")
            try:
                healthy = httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200
            except httpx.TransportError:
                healthy = False
            # Each worker logs its own start; all of them must be serving, not just the first.
            if healthy and self.log.read_text().count(STARTED) >= self.workers:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not start:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        """SIGTERM, wait for the graceful exit, and return the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        status = self.process.returncode
        self.process = None
        return status

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0)
