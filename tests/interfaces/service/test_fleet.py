"""Four server workers and two library processes share one PostgreSQL and one Redis.

Every run, over HTTP or in a library process, is one durable metrics row and one sample in
the namespace's shared windows; ``/metrics`` (answered by any one worker) counts exactly the
runs all four workers served.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.backends.redis import drop_namespace, shared_total
from tests.interfaces.service.conftest import drop_schema, postgres_schema_url
from tests.interfaces.service.server import Server
from tests.leftovers import unique_name

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

HTTP_CLIENTS = 8
HTTP_RUNS = 10
LIBRARY_PROCESSES = 2
LIBRARY_RUNS = 20

LIBRARY = """
import sys
from contextstore import connect
database_url, redis_url, namespace, name, runs = sys.argv[1:]
with connect(database_url, redis_url, namespace) as store:
    engine = store.engine(worker=name)
    for i in range(int(runs)):
        engine.run(f"library question {i % 9}")
"""


def test_four_workers_and_two_library_processes_count_exactly(
    tmp_path: Path, postgres_server_url: str, redis_url: str
) -> None:
    schema, url = postgres_schema_url(postgres_server_url)
    namespace = unique_name("fleet")
    server = Server(tmp_path, url, redis_url, workers=4)
    server.start()
    observer = redis.Redis.from_url(redis_url)
    try:
        key = server.key(namespace, "admin")
        failures: list[int] = []

        def client() -> None:
            # A new connection per request spreads the runs over the workers.
            with server.client(key) as http:
                for i in range(HTTP_RUNS):
                    response = http.post(
                        "/v1/run",
                        json={"query": f"http question {i % 5}"},
                        headers={"Connection": "close"},
                    )
                    if response.status_code != 200:
                        failures.append(response.status_code)

        library = [
            subprocess.Popen(
                [sys.executable, "-c", LIBRARY, url, redis_url, namespace, f"lib-{n}",
                 str(LIBRARY_RUNS)]
            )
            for n in range(LIBRARY_PROCESSES)
        ]  # fmt: skip
        threads = [threading.Thread(target=client) for _ in range(HTTP_CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [process.wait(timeout=120) for process in library] == [0] * LIBRARY_PROCESSES
        assert failures == []

        http_runs = HTTP_CLIENTS * HTTP_RUNS
        total = http_runs + LIBRARY_PROCESSES * LIBRARY_RUNS
        with server.client(key) as http:
            assert http.get("/v1/metrics/report").json()["runs"] == total
            samples = {
                sample.name: sample.value
                for family in text_string_to_metric_families(http.get("/metrics").text)
                for sample in family.samples
                if sample.labels.get("namespace") == namespace
            }
        assert samples["contextstore_runs_total"] == http_runs
        assert samples["contextstore_run_seconds_count"] == http_runs
        hits = samples["contextstore_cache_hits_total"]
        assert hits + samples["contextstore_cache_misses_total"] == http_runs
        assert shared_total(observer, namespace) == total

        engine = sa.create_engine(url)
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT worker, count(*), sum(CASE WHEN cache_hit THEN 1 ELSE 0 END) "
                    "FROM query_metrics WHERE namespace = :ns GROUP BY worker"
                ),
                {"ns": namespace},
            ).all()
        engine.dispose()
        served = {worker: count for worker, count, _ in rows if worker.startswith("serve:")}
        assert sum(served.values()) == http_runs
        assert len(served) > 1, served  # several workers served, and /metrics summed them all
        assert sum(h for worker, _, h in rows if worker.startswith("serve:")) == hits
        assert {w: c for w, c, _ in rows if w.startswith("lib-")} == {
            f"lib-{n}": LIBRARY_RUNS for n in range(LIBRARY_PROCESSES)
        }
    finally:
        assert server.stop() == 0
        drop_namespace(observer, namespace)
        observer.close()
        drop_schema(postgres_server_url, schema)
