"""The service when a backend fails: SQL unreachable, Redis killed mid-stream, slow clients.

SQL is required: without it ``/readyz`` and every route that needs it answer 503. Redis is
not: while it is down every run still answers 200 (the cache misses, the windows fall back to
process memory), ``/readyz`` says ``degraded``, and sharing resumes when it is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.backends.redis import shared_total
from tests.interfaces.service.conftest import drop_schema, postgres_schema_url
from tests.interfaces.service.server import Server
from tests.interfaces.service.test_api import error
from tests.leftovers import unique_name
from tests.redis_cluster import RedisServer, free_port

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-pw"


def test_sql_unreachable_answers_503_and_a_slow_body_times_out(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://contextstore:{PASSWORD}@127.0.0.1:{free_port()}/nothing"
    server = Server(tmp_path, url, env={"CONTEXTSTORE_REQUEST_TIMEOUT": "1"})
    server.start()
    try:
        admin = server.key("ops", "admin")
        with server.client(admin) as client:
            assert client.get("/healthz").status_code == 200
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {
                "status": "unavailable",
                "sql": "down",
                "redis": "not configured",
            }
            down = [
                client.post("/v1/run", json={"query": "how do I fail over?"}),
                client.post("/v1/match", json={"scope": {"tags": ["ops"]}}),
                client.get("/v1/lessons"),
                client.get("/v1/metrics/report"),
            ]
            for response in down:
                error(503, "backend_unavailable", None, response)
                assert PASSWORD not in response.text

            def slow() -> Iterator[bytes]:
                yield b'{"query": '
                time.sleep(2.0)
                yield b'"late"}'

            message = error(503, "timeout", None, client.post("/v1/run", content=slow()))
            assert message == "the request took longer than 1 s"
    finally:
        assert server.stop() == 0
    assert PASSWORD not in server.log.read_text()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def faults(client: httpx.Client, namespace: str) -> float:
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if name == "contextstore_redis_faults_total" and labels.get("namespace") == namespace:
                return sample.value
    return 0.0


@pytest.mark.postgres
@pytest.mark.redis
def test_runs_answer_while_redis_is_killed_and_sharing_resumes(
    tmp_path: Path, postgres_server_url: str, redis_server: RedisServer
) -> None:
    schema, url = postgres_schema_url(postgres_server_url)
    namespace = unique_name("ns")
    server = Server(tmp_path / "serve", url, redis_server.url)
    server.start()
    observer = redis.Redis(port=redis_server.port, socket_timeout=1, socket_connect_timeout=0.2)
    statuses: list[int] = []
    stop = threading.Event()
    try:
        key = server.key(namespace, "admin")
        with server.client(key) as client:
            for _ in range(5):
                assert client.post("/v1/run", json={"query": "warm up"}).status_code == 200
            assert shared_total(observer, namespace) == 5

            def stream() -> None:
                with server.client(key) as own:
                    i = 0
                    while not stop.is_set():
                        response = own.post("/v1/run", json={"query": f"question {i % 7}"})
                        statuses.append(response.status_code)
                        i += 1

            clients = [threading.Thread(target=stream) for _ in range(3)]
            for thread in clients:
                thread.start()
            time.sleep(0.3)
            redis_server.kill()
            time.sleep(1.5)
            degraded = client.get("/readyz")
            assert degraded.status_code == 200
            assert degraded.json() == {"status": "degraded", "sql": "ok", "redis": "down"}
            during = len(statuses)
            time.sleep(0.5)
            assert len(statuses) > during, "runs stopped while Redis was down"
            assert faults(client, namespace) >= 1

            redis_server.start()  # same port, empty
            stop.set()
            for thread in clients:
                thread.join()
            deadline = time.monotonic() + 10.0
            while client.get("/readyz").json()["status"] != "ok":
                assert time.monotonic() < deadline, "readiness did not recover"
                time.sleep(0.1)
            # The first run after the store's cool-down writes to Redis again.
            while (shared_total(observer, namespace) or 0) == 0:
                assert client.post("/v1/run", json={"query": "after"}).status_code == 200
                assert time.monotonic() < deadline, "sharing did not resume"
                time.sleep(0.05)
            before = shared_total(observer, namespace) or 0
            for _ in range(3):
                assert client.post("/v1/run", json={"query": "shared"}).status_code == 200
            assert shared_total(observer, namespace) == before + 3
        assert statuses, "no run was made"
        assert set(statuses) == {200}, sorted(set(statuses))
    finally:
        stop.set()
        observer.close()
        assert server.stop() == 0
        drop_schema(postgres_server_url, schema)


@pytest.mark.postgres
def test_shutdown_lets_requests_in_flight_finish(tmp_path: Path, postgres_server_url: str) -> None:
    schema, url = postgres_schema_url(postgres_server_url)
    server = Server(tmp_path, url)
    server.start()
    results: list[int | str] = []
    try:
        key = server.key("shutdown")

        def stream() -> None:
            with server.client(key) as client:
                for i in range(200):
                    try:
                        results.append(client.post("/v1/run", json={"query": f"q{i}"}).status_code)
                    except httpx.TransportError as exc:
                        results.append(type(exc).__name__)
                        return

        threads = [threading.Thread(target=stream) for _ in range(4)]
        for thread in threads:
            thread.start()
        # Stop once requests are flowing (a fixed pause is not enough on a loaded machine).
        deadline = time.monotonic() + 30.0
        while len(results) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stop() == 0
        for thread in threads:
            thread.join()
    finally:
        server.stop()
        drop_schema(postgres_server_url, schema)
    answered = [status for status in results if isinstance(status, int)]
    assert answered and set(answered) == {200}, sorted({str(status) for status in results})
    # Every client saw whole answers, then a refused or closed connection (a keep-alive
    # connection closed as the next request went out reads as a reset): never an error status.
    assert {status for status in results if isinstance(status, str)} <= {
        "ConnectError",
        "ReadError",
        "RemoteProtocolError",
        "WriteError",
    }
    log = server.log.read_text()
    assert "Application shutdown complete." in log
