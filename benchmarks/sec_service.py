"""``/v1/run`` over HTTP against the same run in process, and throughput with 32 clients.

Both sides use the same PostgreSQL + Redis, the sample lessons and the demo's documents as the
knowledge base; each side has its own namespace and every query is new, so both measure
cache misses. The server runs as deployed: uvloop and httptools (the ``serve`` extra), the
access log on (written to a file). Latency: one ``contextstore serve`` worker and one
keep-alive client (the standard library's ``http.client``, as lean as the clients of other
languages), runs interleaved with the same async engine's in process, after a warm-up of
both — the difference is what HTTP, JSON and the server add (target ≤ 1 ms at p50 on
loopback). That is measured in several blocks, each with a server process, a connection and
an in-process store of its own: where the processes land and which database connections
they get shift a whole block's difference by a few tenths of a millisecond, so one block
alone says more about that draw than about the server. Each percentile reported is the
median of the blocks' (HTTP, in-process and their difference alike), every block's
difference in the note. Throughput: 32 concurrent ``httpx`` clients on one event loop
against 1, then 2 workers, warmed up first.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.context import Bench
from benchmarks.report import Row, ms, rate
from benchmarks.timing import percentile
from contextstore.core.matching import Scope
from contextstore.interfaces.apikeys import add_key, create_key_file
from contextstore.sample_data import demo_corpus_lines, load_demo_queries, load_lessons
from contextstore.store.aio import connect_async
from contextstore.store.sync import connect

SECTION = "HTTP API, PostgreSQL + Redis"
CLIENTS = 32
PERCENTILES = (("p50", 0.5), ("p95", 0.95))


class Served:
    """``contextstore serve`` in a subprocess on a free port."""

    def __init__(self, directory: Path, database_url: str, redis_url: str, workers: int) -> None:
        self.keys = directory / "keys.json"
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTSTORE_", "PROM"))}
        env.update(
            CONTEXTSTORE_DATABASE_URL=database_url,
            CONTEXTSTORE_REDIS_URL=redis_url,
            CONTEXTSTORE_API_KEYS=str(self.keys),
        )
        self.env = env
        self.workers = workers
        self.log = directory / f"serve-{workers}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def key(self, namespace: str) -> str:
        return add_key(self.keys, namespace, "agent")[0]

    def __enter__(self) -> Served:
        create_key_file(self.keys)  # a server refuses to start without one
        command = [sys.executable, "-m", "contextstore", "serve", "--port", str(self.port),
                   "--workers", str(self.workers)]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = self.log.read_text().count("Application startup complete.")
            if started >= self.workers and _answers(self.url):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"contextstore serve did not start: {self.log.read_text()[-2000:]}")

    def __exit__(self, kind: object = None, error: BaseException | None = None, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        if isinstance(error, Exception):  # what the server said goes with the client's error
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{error!r} while serving; the server's log ends:\n{tail}"
            ) from error


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _work() -> list[tuple[str, Scope]]:
    return [
        (item.query, Scope(entity_ids=item.entity_ids, tags=item.tags))
        for item in load_demo_queries()
    ]


async def _latency(
    bench: Bench, served: Served, url: str, namespaces: tuple[str, str], block: int
) -> tuple[list[float], list[float]]:
    """(HTTP ms, in-process ms) of interleaved cache-miss runs of the async engine."""
    local, remote = namespaces
    key = served.key(remote)
    work = _work()
    http_ms: list[float] = []
    local_ms: list[float] = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    client = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    async with connect_async(url, bench.services.redis_url, local) as store:
        engine = store.engine(worker="bench")
        warmup, iterations = 10, bench.pick(40, 200)
        for i in range(warmup + iterations):
            query, scope = work[i % len(work)]
            variant = f"{query} (b{block} v{i})"
            body = {
                "query": variant,
                "scope": {"entity_ids": list(scope.entity_ids), "tags": list(scope.tags)},
            }
            for side in ("http", "local") if i % 2 else ("local", "http"):
                started = time.perf_counter()
                if side == "http":
                    # Blocking on purpose: nothing else runs meanwhile, and the in-process
                    # side gets the loop to itself in turn.
                    client.request("POST", "/v1/run", json.dumps(body), headers)
                    response = client.getresponse()
                    response.read()
                    if response.status != 200:
                        raise RuntimeError(f"/v1/run answered {response.status}")
                else:
                    await engine.run(variant, scope=scope)
                took = (time.perf_counter() - started) * 1000.0
                if i >= warmup:
                    (http_ms if side == "http" else local_ms).append(took)
            if i % 50 == 0:
                bench.say(f"HTTP API: latency, block {block + 1}, {i}/{warmup + iterations}")
    client.close()
    return http_ms, local_ms


async def _throughput(served: Served, key: str, seconds: float) -> float:
    """Runs per second that ``CLIENTS`` concurrent clients get for ``seconds``, once every
    client has a warm connection and every worker has served (a warm-up of a second)."""
    work = _work()
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, limits=limits) as client:

        async def one(worker: int, stop_at: float, label: str) -> int:
            done = 0
            while time.perf_counter() < stop_at:
                query, scope = work[(worker + done) % len(work)]
                text = f"{query} ({label}{worker}.{done})"
                body = {"query": text, "scope": {"tags": list(scope.tags)}}
                response = await client.post("/v1/run", json=body, timeout=60)
                response.raise_for_status()
                done += 1
            return done

        warm_until = time.perf_counter() + 1.0
        await asyncio.gather(*(one(n, warm_until, "w") for n in range(CLIENTS)))
        started = time.perf_counter()
        counts = await asyncio.gather(*(one(n, started + seconds, "t") for n in range(CLIENTS)))
        return sum(counts) / (time.perf_counter() - started)


def run(bench: Bench) -> list[Row]:
    bench.services.require_postgres()
    bench.services.require_redis()
    bench.say("HTTP API: preparing the database")
    url = bench.services.database_url("postgresql", "service")
    namespaces = (
        bench.services.namespace("service-inproc"),
        bench.services.namespace("service-http"),
    )
    with connect(url, "", "default") as store:
        store.lessons.import_records(load_lessons())
    for namespace in namespaces:  # the demo's documents, as each side's knowledge base
        with connect(url, "", namespace) as store:
            store.knowledge.import_jsonl(demo_corpus_lines())
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="cs-bench-serve-") as scratch:
        directory = Path(scratch)
        blocks: list[tuple[list[float], list[float]]] = []
        for block in range(bench.pick(3, 5)):
            with Served(directory, url, bench.services.redis_url, 1) as served:
                blocks.append(asyncio.run(_latency(bench, served, url, namespaces, block)))
        for label, fraction in PERCENTILES:
            pairs = [(percentile(h, fraction), percentile(local, fraction)) for h, local in blocks]
            ours = statistics.median(h for h, _ in pairs)
            base = statistics.median(local for _, local in pairs)
            added = [h - local for h, local in pairs]
            adds = statistics.median(added)
            target, met = ("≤ +1 ms", adds <= 1.0) if label == "p50" else ("", None)
            each = ", ".join(ms(value) for value in added)
            rows.append(
                Row(
                    SECTION,
                    f"/v1/run over HTTP, cache miss, {label}",
                    ms(ours),
                    "the same run in process",
                    ms(base),
                    ours / base,
                    target=target,
                    met=met,
                    note=f"HTTP adds {ms(adds)} (median of {len(blocks)} blocks: {each})",
                    values={
                        "http_ms": ours,
                        "in_process_ms": base,
                        "added_ms": adds,
                        "blocks": [{"http_ms": h, "in_process_ms": local} for h, local in pairs],
                    },
                )
            )
        seconds = bench.pick(3.0, 10.0)
        rates: dict[int, float] = {}
        for workers in (1, 2):
            bench.say(f"HTTP API: {CLIENTS} clients, {workers} worker(s)")
            with Served(directory, url, bench.services.redis_url, workers) as served:
                key = served.key(bench.services.namespace(f"service-load{workers}"))
                rates[workers] = asyncio.run(_throughput(served, key, seconds))
        for workers, per_second in rates.items():
            rows.append(
                Row(
                    SECTION,
                    f"{CLIENTS} concurrent clients, {workers} worker{'s' if workers > 1 else ''}",
                    rate(per_second).replace("/s", "runs/s"),
                    "1 worker" if workers > 1 else "",
                    rate(rates[1]).replace("/s", "runs/s") if workers > 1 else "",
                    per_second / rates[1] if workers > 1 else None,
                    values={"runs_per_second": per_second},
                )
            )
    return rows
