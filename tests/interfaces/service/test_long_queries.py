"""Long queries against a real ``contextstore serve`` (SQLite, and PostgreSQL with Redis).

A query is bounded after analysis (its first 64 distinct terms), its statement is built and
compiled off the event loop, and the compiled statements a process keeps are bounded. So:

- a 20,000-word search answers in under 1 s, and ``/healthz`` answers in under 100 ms
  meanwhile; each attempt uses a filter of a kind not seen before, so its statement is
  built and compiled then (the costly case). Wall clocks on a loaded machine: the best of
  ``ATTEMPTS`` counts, and the bug this guards against (a statement per distinct word) took
  16 s for one search, every time;
- a pasted 8 kB log of 1,001 distinct words runs (``/v1/run``) and searches;
- ``/v1/run`` of a query near the 1 MiB body limit answers, and ``/healthz`` answers in under
  100 ms meanwhile: a query is analysed on its first 16,384 characters, where a regular
  expression over all of it held the GIL, and so the loop, for about 0.5 s;
- 200 searches of random lengths up to 1,000 words, with every term count from 1 to 64
  among them, grow the server's resident memory (``/proc``) by less than 50 MB (a
  statement cached per term count once grew it by 1.5 GB in 60 searches).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.interfaces.service.conftest import BACKENDS, drop_schema, postgres_schema_url
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

ATTEMPTS = 3
WORDS = 20_000
SEARCH_LIMIT_S = 1.0
HEALTH_LIMIT_S = 0.1
MEMORY_LIMIT_MB = 50
DOCUMENTS = 120
CORPUS_WORDS = 870  # the documents hold w0 … w869 (and a few more)


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, httpx.Client]]:
    """A server with the default body limit (1 MiB) and an admin key's client, its
    namespace holding ``DOCUMENTS`` documents of 40 words each, ``w0`` … ``w872``."""
    directory: Path = tmp_path_factory.mktemp(f"long-{request.param}")
    schema = server_url = None
    if request.param == "sqlite":
        server = Server(directory, f"sqlite:///{directory / 'store.db'}")
    else:
        server_url = request.getfixturevalue("postgres_server_url")
        schema, url = postgres_schema_url(server_url)
        server = Server(directory, url, request.getfixturevalue("redis_url"))
    try:
        server.start()
        client = server.client(server.key("long", "admin"))
        lines = "".join(
            json.dumps(
                {
                    "source": f"d{i}.md",
                    "text": " ".join(f"w{(i * 7 + j) % 3000}" for j in range(40)),
                    "metadata": {"k": "a"},
                }
            )
            + "\n"
            for i in range(DOCUMENTS)
        )
        loaded = client.post(
            "/v1/documents/import",
            content=lines.encode(),
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["added"] == DOCUMENTS
        yield server, client
        client.close()
        assert server.stop() == 0, server.log.read_text()
    finally:
        server.stop()
        if schema is not None and server_url is not None:
            drop_schema(server_url, schema)


class HealthProbe:
    """``/healthz`` asked again and again from a thread; each answer's wait is kept."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=30.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe)
        self.waits: list[float] = []

    def _probe(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            assert self._client.get("/healthz").status_code == 200
            self.waits.append(time.perf_counter() - started)
            time.sleep(0.005)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        while not self.waits:  # the probe is answering before the measured call starts
            time.sleep(0.005)
        self.waits.clear()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


def rss_mb(server: Server) -> float:
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_20000_word_search_answers_in_a_second_and_health_meanwhile(
    served: tuple[Server, httpx.Client],
) -> None:
    server, client = served
    # Distinct words the corpus holds, so the first 64 find passages.
    query = " ".join(f"w{i}" for i in range(WORDS))
    measured: list[tuple[float, float, int]] = []
    # A filter of a value kind no earlier search used: a shape built and compiled now.
    for attempt, value in enumerate([["a", 1], ["a", 1, True], ["a", 1, True, None]]):
        with HealthProbe(server.url) as probe:
            started = time.perf_counter()
            answer = client.post(
                "/v1/search", json={"query": query, "top_k": 3, "filters": {"k": value}}
            )
            elapsed = time.perf_counter() - started
            time.sleep(0.02)  # a probe sent during the search has answered
        assert answer.status_code == 200, answer.text
        first_terms = {f"w{i}" for i in range(64)}  # the terms a search keeps
        assert len(answer.json()) == 3
        assert all(first_terms & set(chunk["text"].split()) for chunk in answer.json())
        measured.append((elapsed, max(probe.waits), len(probe.waits)))
        if elapsed < SEARCH_LIMIT_S and max(probe.waits) < HEALTH_LIMIT_S:
            break
        assert attempt < ATTEMPTS - 1, f"(search s, slowest /healthz s, probes): {measured}"


def test_a_pasted_log_of_1001_distinct_words_runs_and_searches(
    served: tuple[Server, httpx.Client],
) -> None:
    _, client = served
    # 8 kB of 1,001 distinct words: w7 (held by d0 and d1), then 1,000 hex ids none holds.
    log = " ".join(["w7", *(f"e{n:06x}" for n in range(1_000))])
    assert len(set(log.split())) == 1_001 and len(log.encode()) == 8_002
    ran = client.post("/v1/run", json={"query": log})
    assert ran.status_code == 200, ran.text
    assert ran.json()["query_analysis"]["original_query"] == log
    assert "w7" in ran.json()["context"]
    found = client.post("/v1/search", json={"query": log, "top_k": 5})
    assert found.status_code == 200, found.text
    assert [chunk["source"] for chunk in found.json()] == ["d0.md", "d1.md"]


def test_a_run_of_a_query_near_1_mib_leaves_health_answering(
    served: tuple[Server, httpx.Client],
) -> None:
    server, client = served
    # 1,014,991 characters of 145,000 distinct words; w7 (d0, d1) first, w9 after the bound.
    words = ["w7", *(f"e{n:05x}" for n in range(144_998)), "w9"]
    query = " ".join(words)
    assert 1_000_000 < len(query.encode()) < 1_048_576 - 100
    measured: list[tuple[float, float, int]] = []
    for attempt in range(ATTEMPTS):
        with HealthProbe(server.url) as probe:
            started = time.perf_counter()
            ran = client.post("/v1/run", json={"query": query}, timeout=60.0)
            elapsed = time.perf_counter() - started
            time.sleep(0.02)  # a probe sent during the run has answered
        assert ran.status_code == 200, ran.text
        analysis = ran.json()["query_analysis"]
        assert analysis["original_query"] == query
        normalized = analysis["normalized"]
        assert normalized.startswith("w7 e00000 ") and "w9" not in normalized
        assert "w7" in ran.json()["context"]
        measured.append((elapsed, max(probe.waits), len(probe.waits)))
        if max(probe.waits) < HEALTH_LIMIT_S:
            break
        assert attempt < ATTEMPTS - 1, f"(run s, slowest /healthz s, probes): {measured}"


def test_200_searches_of_any_length_grow_the_server_by_less_than_50_mb(
    served: tuple[Server, httpx.Client],
) -> None:
    server, client = served
    rng = random.Random(21)

    def search(length: int, distinct: int) -> None:
        """A query of ``length`` words cycling through ``distinct`` random corpus words."""
        vocabulary = [f"w{n}" for n in rng.sample(range(CORPUS_WORDS), distinct)]
        query = " ".join(vocabulary[i % distinct] for i in range(length))
        answer = client.post("/v1/search", json={"query": query, "top_k": 3})
        assert answer.status_code == 200, answer.text
        assert answer.json()  # every word is in the corpus

    for distinct in (1, CORPUS_WORDS):  # the first searches: what any search allocates
        search(distinct, distinct)
    before = rss_mb(server)
    # Every distinct-term count from 1 to 64, then random lengths up to 1,000 words of
    # distinct words (64 terms kept of each).
    for distinct in range(1, 65):
        search(rng.randint(distinct, 1_000), distinct)
    for _ in range(200 - 64):
        length = rng.randint(65, 1_000)
        search(length, min(length, CORPUS_WORDS))
    grown = rss_mb(server) - before
    assert grown < MEMORY_LIMIT_MB, f"grew {grown:.1f} MB from {before:.1f} MB"
