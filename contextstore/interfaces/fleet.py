"""Running a fleet: N real agent processes sharing one store, each running demo queries.

Each worker is its own process started with the *spawn* method, so nothing — no SQL pool, no
Redis socket, no cache — is inherited by accident: every worker connects exactly as a
separate agent host would. Workers build their engine first and report ``ready``; the clock
starts only when all of them are, so runs per second measure the runs, not interpreter start.
Progress travels over one ``multiprocessing`` queue to the parent, which passes each update
to the caller's ``on_progress`` callback. Every run is recorded by the worker's engine under
the worker name ``fleet-<id>-<n>``, so the caller can read the fleet's durable figures back
from the SQL metrics with ``worker_prefix(fleet_id)``. Every worker retrieves from the
namespace's knowledge base in SQL, as any agent of the fleet does; ``load_sample_corpus``
puts the sample documents there once (an import leaves unchanged documents alone).

Pure library: no console output. ``worker_main`` is the spawned processes' entry point, so it
lives here, importable without the command line.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextstore.backends.sql.database import normalise_url
from contextstore.backends.sql.dialects import dialect_of
from contextstore.core.matching import Scope
from contextstore.errors import ConfigurationError, ValidationError

__all__ = [
    "FleetOutcome",
    "FleetSpec",
    "ProgressCallback",
    "WorkerOutcome",
    "load_sample_corpus",
    "new_fleet_id",
    "run_fleet",
    "shareable_database_url",
    "worker_main",
    "worker_name",
    "worker_prefix",
]

# A worker sends at most one progress message per this many seconds (plus its last one):
# enough for a smooth display, and the queue stays cheap next to the runs themselves.
PROGRESS_INTERVAL_SECONDS = 0.1
# How long the parent waits on the queue before checking that every worker is still alive.
POLL_SECONDS = 0.2
# A worker polls its start signal this often, so it notices a parent that died meanwhile.
START_POLL_SECONDS = 0.5
# A worker that has said nothing at all for this long after starting is reported as stuck.
READY_TIMEOUT_SECONDS = 120.0
# How long a cleanly exited worker's final message may take to be read before it counts lost.
EXIT_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class FleetSpec:
    """What every worker needs (picklable: it crosses the process boundary)."""

    fleet_id: str
    database_url: str
    redis_url: str | None
    namespace: str
    queries: int


@dataclass
class WorkerOutcome:
    """One worker as the parent saw it: runs finished, cache hits, seconds, failure if any."""

    name: str
    runs: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    error: str | None = None
    finished: bool = False


@dataclass
class FleetOutcome:
    """The fleet as the parent saw it. ``wall_seconds`` runs from the start signal to the
    last worker's end (startup excluded)."""

    fleet_id: str
    workers: list[WorkerOutcome] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failures(self) -> list[WorkerOutcome]:
        return [worker for worker in self.workers if worker.error is not None]

    @property
    def runs(self) -> int:
        return sum(worker.runs for worker in self.workers)


def worker_prefix(fleet_id: str) -> str:
    """The ``worker`` column prefix shared by every run of fleet ``fleet_id``."""
    return f"fleet-{fleet_id}-"


def worker_name(fleet_id: str, index: int) -> str:
    """The ``worker`` column value of worker ``index`` (from 0) of fleet ``fleet_id``."""
    return f"{worker_prefix(fleet_id)}{index}"


def new_fleet_id() -> str:
    """A fresh fleet id: 8 random hex digits."""
    return uuid.uuid4().hex[:8]


def shareable_database_url(database_url: str) -> str:
    """The database URL to give the workers: SQLite file paths made absolute.

    Workers are separate processes, possibly with another working directory, so a relative
    SQLite path is resolved here; ``file:`` URIs and server URLs (PostgreSQL) are returned
    unchanged. Raises ``ConfigurationError`` for an in-memory SQLite database, which
    processes cannot share, and for a URL of neither database.
    """
    url = normalise_url(database_url)
    if not dialect_of(url.get_backend_name()).is_file:
        return database_url
    database = url.database or ""
    # SQLAlchemy keeps "?mode=memory" of a file: URI in the URL's query, not in the path.
    in_memory = url.query.get("mode") == "memory" or "mode=memory" in database
    if not database or database == ":memory:" or in_memory:
        raise ConfigurationError(
            "fleet workers are separate processes and cannot share an in-memory SQLite "
            "database; give --database-url a file or a PostgreSQL URL"
        )
    if database.startswith("file:"):
        return database_url
    path = Path(database).expanduser().resolve()
    return url.set(database=str(path)).render_as_string(hide_password=False)


ProgressCallback = Callable[[int, WorkerOutcome], None]


# Each worker is a whole Python process with its own connections; beyond this a demo fleet
# only exhausts the machine (and PostgreSQL's default 100 connections).
MAX_WORKERS = 64


def run_fleet(
    spec: FleetSpec, workers: int, on_progress: ProgressCallback | None = None
) -> FleetOutcome:
    """Start ``workers`` processes running ``spec.queries`` demo queries each; wait for all.

    ``on_progress(index, outcome)`` is called in this process whenever worker ``index``
    reports. Never raises for a worker's failure: it is recorded in its ``WorkerOutcome``.
    The caller has already migrated the database and seeded the lessons. ``workers`` must be
    1–``MAX_WORKERS`` (``ValidationError("workers")``), checked before any process starts.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValidationError("workers", f"must be 1–{MAX_WORKERS}, got {workers!r}")
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()
    go = context.Event()
    outcome = FleetOutcome(
        spec.fleet_id,
        [WorkerOutcome(worker_name(spec.fleet_id, index)) for index in range(workers)],
    )
    processes = [
        context.Process(
            target=worker_main,
            args=(index, spec, messages, go),
            name=outcome.workers[index].name,
            daemon=True,
        )
        for index in range(workers)
    ]
    try:
        for process in processes:
            process.start()
        ready: set[int] = set()
        dead_since: dict[int, float] = {}
        waiting_since = time.monotonic()
        # Phase 1: every worker connected and built its engine (or failed trying).
        while len(ready) + len(outcome.failures) < workers:
            _drain(messages, outcome, ready, on_progress)
            _check_alive(processes, outcome, dead_since)
            if time.monotonic() - waiting_since > READY_TIMEOUT_SECONDS:
                for index in set(range(workers)) - ready:
                    if outcome.workers[index].error is None:
                        outcome.workers[index].error = "did not become ready in time"
                break
        started = time.perf_counter()
        go.set()
        # Phase 2: the runs. A worker is finished when it said so or its process is gone.
        while not all(w.finished or w.error is not None for w in outcome.workers):
            _drain(messages, outcome, ready, on_progress)
            _check_alive(processes, outcome, dead_since)
        outcome.wall_seconds = time.perf_counter() - started
    finally:
        go.set()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()
        messages.close()
    return outcome


def _drain(
    messages: Any,
    outcome: FleetOutcome,
    ready: set[int],
    on_progress: ProgressCallback | None,
) -> None:
    """Apply every message waiting on the queue (waiting up to ``POLL_SECONDS`` for one)."""
    timeout: float | None = POLL_SECONDS
    while True:
        try:
            message = messages.get(timeout=timeout) if timeout else messages.get_nowait()
        except queue_module.Empty:
            return
        timeout = None
        kind, index, *rest = message
        worker = outcome.workers[index]
        if kind == "ready":
            ready.add(index)
            continue
        if kind == "progress":
            worker.runs, worker.cache_hits, worker.seconds = rest
        elif kind == "done":
            worker.runs, worker.cache_hits, worker.seconds = rest
            worker.finished = True
        elif kind == "failed":
            worker.error, worker.runs, worker.cache_hits, worker.seconds = rest
        if on_progress is not None:
            on_progress(index, worker)


def _check_alive(processes: list[Any], outcome: FleetOutcome, dead_since: dict[int, float]) -> None:
    """A process that is gone without its final message (killed, crashed at import) failed.

    A worker that exited cleanly gets ``EXIT_GRACE_SECONDS`` for its last message, already in
    the pipe, to be read before it is judged.
    """
    now = time.monotonic()
    for index, process in enumerate(processes):
        worker = outcome.workers[index]
        if worker.finished or worker.error is not None or process.is_alive():
            continue
        if process.exitcode != 0:
            worker.error = f"process exited with code {process.exitcode} before finishing"
        elif now - dead_since.setdefault(index, now) > EXIT_GRACE_SECONDS:
            worker.error = "process exited without reporting its result"


def load_sample_corpus(store: Any, progress: Callable[[int], None] | None = None) -> Any:
    """The sample corpus in ``store``'s knowledge base, embedded with ``HashingEmbedder`` so
    runs fuse cosine with BM25 (as the demo's do); returns the import's summary. Unchanged
    documents are left alone, and ones stored earlier without embeddings get theirs, so a
    second fleet on the same namespace loads nothing."""
    from contextstore.sample_data import corpus_lines

    store.config.retrieval.embeddings = True
    summary = store.knowledge.import_jsonl(corpus_lines())
    store.knowledge.reembed(progress=progress)
    return summary


def worker_main(index: int, spec: FleetSpec, messages: Any, go: Any) -> None:
    """One agent process: connect, build the engine, wait for the start, run, report.

    Any exception ends this worker with a ``failed`` message (one line) and exit code 1.
    """
    runs = hits = 0
    seconds = 0.0
    try:
        # Imported here so that even a broken install is reported as this worker's one line.
        from contextstore.core.embedding import HashingEmbedder
        from contextstore.sample_data import load_demo_queries
        from contextstore.store.sync import connect

        # "" (not None) forces memory backends even if CONTEXTSTORE_REDIS_URL is set here.
        store = connect(spec.database_url, spec.redis_url or "", spec.namespace)
        with store:
            # The namespace's knowledge base, ranked as the demo ranks it (cosine and BM25).
            store.config.retrieval.embeddings = True
            engine = store.engine(
                embed_fn=HashingEmbedder(), worker=worker_name(spec.fleet_id, index)
            )
            workload = [
                (item.query, Scope(entity_ids=item.entity_ids, tags=item.tags), item.filters)
                for item in load_demo_queries()
            ]
            _ = store.metrics, store.lessons  # connect and check the schema before the clock
            messages.put(("ready", index))
            parent = multiprocessing.parent_process()
            while not go.wait(START_POLL_SECONDS):
                if parent is not None and not parent.is_alive():
                    return
            started = time.perf_counter()
            last_report = started
            for number in range(spec.queries):
                query, scope, filters = workload[number % len(workload)]
                result = engine.run(query, scope=scope, filters=filters)
                runs += 1
                hits += result.cache_hit
                now = time.perf_counter()
                seconds = now - started
                if now - last_report >= PROGRESS_INTERVAL_SECONDS:
                    messages.put(("progress", index, runs, hits, seconds))
                    last_report = now
        messages.put(("done", index, runs, hits, seconds))
    except BaseException as exc:  # report anything, even KeyboardInterrupt, as one line
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        messages.put(
            ("failed", index, f"{type(exc).__name__}: {text}".rstrip(": "), runs, hits, seconds)
        )
        raise SystemExit(1) from None
