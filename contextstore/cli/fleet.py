"""``contextstore fleet``: N real agent processes sharing one store, then the fleet's report.

Each worker is its own process started with the *spawn* method, so nothing — no SQL pool, no
Redis socket, no cache — is inherited by accident: every worker connects exactly as a
separate agent host would. Workers build their engine first and report ``ready``; the clock
starts only when all of them are, so runs per second measure the runs, not interpreter start.
Progress travels over one ``multiprocessing`` queue to the parent, which draws one bar per
worker. The report is read back from the SQL metrics for this fleet only (workers named
``fleet-<id>-<n>``), so it counts what was made durable, not what the workers claim.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contextstore.cli.common import console, console_err, format_cell, print_json, table
from contextstore.cli.options import DatabaseUrl, Json, Namespace, RedisUrl, open_store
from contextstore.config import ContextEngineConfig
from contextstore.matching import Scope
from contextstore.sample_data import load_lessons

__all__ = ["FleetOutcome", "FleetSpec", "WorkerOutcome", "fleet", "run_fleet", "worker_prefix"]

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


def new_fleet_id() -> str:
    return uuid.uuid4().hex[:8]


ProgressCallback = Callable[[int, WorkerOutcome], None]


def run_fleet(
    spec: FleetSpec, workers: int, on_progress: ProgressCallback | None = None
) -> FleetOutcome:
    """Start ``workers`` processes running ``spec.queries`` demo queries each; wait for all.

    ``on_progress(index, outcome)`` is called in this process whenever worker ``index``
    reports. Never raises for a worker's failure: it is recorded in its ``WorkerOutcome``.
    The caller has already migrated the database and seeded the lessons.
    """
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()
    go = context.Event()
    outcome = FleetOutcome(
        spec.fleet_id,
        [WorkerOutcome(f"{worker_prefix(spec.fleet_id)}{index}") for index in range(workers)],
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


def worker_main(index: int, spec: FleetSpec, messages: Any, go: Any) -> None:
    """One agent process: connect, build the engine, wait for the start, run, report.

    Any exception ends this worker with a ``failed`` message (one line) and exit code 1.
    """
    runs = hits = 0
    seconds = 0.0
    try:
        # Imported here so that even a broken install is reported as this worker's one line.
        from contextstore.embedding import HashingEmbedder
        from contextstore.sample_data import load_demo_queries, sample_retriever
        from contextstore.store import connect

        # "" (not None) forces memory backends even if CONTEXTSTORE_REDIS_URL is set here.
        store = connect(spec.database_url, spec.redis_url or "", spec.namespace)
        with store:
            embed = HashingEmbedder()
            engine = store.engine(
                retriever=sample_retriever(embed_fn=embed),
                embed_fn=embed,
                worker=f"{worker_prefix(spec.fleet_id)}{index}",
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


# -- the command ------------------------------------------------------------------------------


def fleet(
    workers: Annotated[int, typer.Option("--workers", help="Agent processes to start (≥ 1)")] = 4,
    queries: Annotated[
        int, typer.Option("--queries", help="Demo queries each worker runs (≥ 1)")
    ] = 100,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """Run N agent processes against the shared store and report the fleet from SQL."""
    err = console_err
    if workers < 1:
        err.print(f"[red]error:[/red] --workers must be at least 1, got {workers}", highlight=False)
        raise typer.Exit(2)
    if queries < 1:
        err.print(f"[red]error:[/red] --queries must be at least 1, got {queries}", highlight=False)
        raise typer.Exit(2)
    with open_store(database_url, redis_url, namespace) as store:
        database = _shareable_database_url(store.config)
        fallback = _fallback_note(store.config, database)
        if fallback:
            err.print(f"[yellow]note:[/yellow] {fallback}", highlight=False)
        seeded = store.lessons.import_records(load_lessons())
        spec = FleetSpec(
            fleet_id=new_fleet_id(),
            database_url=database,
            redis_url=store.config.redis_url,
            namespace=store.namespace,
            queries=queries,
        )
        prefix = worker_prefix(spec.fleet_id)
        out = err if as_json else console
        out.print(
            f"fleet [bold]{spec.fleet_id}[/bold]: {workers} workers × {queries} queries · "
            f"namespace {store.namespace} · sample lessons: {seeded.added} added, "
            f"{seeded.updated} updated, {seeded.unchanged} unchanged",
            highlight=False,
        )
        outcome = _run_with_progress(spec, workers, out)
        report = store.metrics.report(worker_prefix=prefix)
        count = store.metrics.count(worker_prefix=prefix)
    expected = workers * queries
    count_sql = f"SELECT count(*) FROM query_metrics WHERE worker LIKE '{prefix}%'"
    runs_per_second = report.runs / outcome.wall_seconds if outcome.wall_seconds > 0 else None
    summary: dict[str, Any] = {
        "fleet_id": spec.fleet_id,
        "worker_prefix": prefix,
        "workers": workers,
        "queries_per_worker": queries,
        "expected_runs": expected,
        "runs": report.runs,
        "sql_count": count,
        "count_sql": count_sql,
        "wall_seconds": outcome.wall_seconds,
        "runs_per_second": runs_per_second,
        "p50_ms": report.p50_ms,
        "p95_ms": report.p95_ms,
        "p99_ms": report.p99_ms,
        "cache_hit_rate": report.cache_hit_rate,
        "guard_failure_rate": report.guard_failure_rate,
        "lessons_matched_total": report.lessons_matched_total,
        "lessons_included_total": report.lessons_included_total,
        "lessons_matched_mean": report.lessons_matched_mean,
        "lessons_included_mean": report.lessons_included_mean,
        "failures": [{"worker": w.name, "error": w.error} for w in outcome.failures],
    }
    if as_json:
        print_json(summary)
    else:
        _print_report(summary, outcome)
    for worker in outcome.failures:
        err.print(f"[red]worker {worker.name} failed:[/red] {worker.error}", highlight=False)
    if outcome.failures:
        raise typer.Exit(1)
    if report.runs != expected:
        err.print(
            f"[red]error:[/red] SQL holds {report.runs} runs for fleet {spec.fleet_id}, "
            f"expected {expected}",
            highlight=False,
        )
        raise typer.Exit(1)


def _shareable_database_url(config: ContextEngineConfig) -> str:
    """The database URL the workers get: SQLite paths made absolute; memory refused."""
    url = sa.make_url(config.database_url)
    if url.get_backend_name() != "sqlite":
        return config.database_url
    database = url.database or ""
    if not database or database == ":memory:" or "mode=memory" in database:
        console_err.print(
            "[red]error:[/red] fleet workers are separate processes and cannot share an "
            "in-memory SQLite database; give --database-url a file or a PostgreSQL URL",
            highlight=False,
        )
        raise typer.Exit(2)
    if database.startswith("file:"):
        return config.database_url
    path = Path(database).expanduser().resolve()
    return url.set(database=str(path)).render_as_string(hide_password=False)


def _fallback_note(config: ContextEngineConfig, database_url: str) -> str | None:
    """One line saying which shared state is not configured and what stands in for it."""
    url = sa.make_url(database_url)
    sqlite = url.get_backend_name() == "sqlite"
    where = f"the SQLite file {url.database} (WAL)"
    if sqlite and config.redis_url is None:
        return (
            f"no PostgreSQL or Redis configured: the workers share {where}, and each keeps "
            "its own process-memory cache and adaptive windows"
        )
    if config.redis_url is None:
        return (
            "no Redis configured: each worker keeps its own process-memory cache and "
            "adaptive windows"
        )
    if sqlite:
        return f"no PostgreSQL configured: the workers share {where}"
    return None


def _run_with_progress(spec: FleetSpec, workers: int, out: Console) -> FleetOutcome:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[hits]}"),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    )
    names = [f"{worker_prefix(spec.fleet_id)}{index}" for index in range(workers)]
    with progress:
        tasks = [
            progress.add_task(name, total=spec.queries, rate="starting", hits="") for name in names
        ]

        def update(index: int, worker: WorkerOutcome) -> None:
            rate = f"{worker.runs / worker.seconds:,.0f} runs/s" if worker.seconds > 0 else ""
            hit = f"hits {worker.cache_hits / worker.runs:.0%}" if worker.runs else ""
            if worker.error is not None:
                rate = "[red]failed[/red]"
            progress.update(tasks[index], completed=worker.runs, rate=rate, hits=hit)

        return run_fleet(spec, workers, update)


def _print_report(summary: dict[str, Any], outcome: FleetOutcome) -> None:
    def rate(value: float | None) -> str:
        return "—" if value is None else f"{value:.1%}"

    def per_run(total: int, mean: float | None) -> str:
        return "—" if mean is None else f"{mean:.2f} per run ({total:,} in all)"

    figures = [
        ["runs (in SQL)", f"{summary['runs']:,} of {summary['expected_runs']:,} expected"],
        ["runs per second", format_cell(summary["runs_per_second"])],
        [
            "p50 / p95 / p99 ms",
            " / ".join(format_cell(summary[name]) for name in ("p50_ms", "p95_ms", "p99_ms")),
        ],
        ["cache hit rate", rate(summary["cache_hit_rate"])],
        ["guard-failure rate", rate(summary["guard_failure_rate"])],
        [
            "lessons matched",
            per_run(summary["lessons_matched_total"], summary["lessons_matched_mean"]),
        ],
        [
            "lessons included",
            per_run(summary["lessons_included_total"], summary["lessons_included_mean"]),
        ],
        ["wall time", f"{summary['wall_seconds']:.2f} s (from the start signal)"],
    ]
    # Figure/value rows rather than one wide row: it stays readable in an 80-column terminal.
    console.print(
        table(
            f"Fleet {summary['fleet_id']}, read back from SQL (worker LIKE "
            f"'{summary['worker_prefix']}%')",
            ["figure", "value"],
            figures,
        )
    )
    rows = [
        [
            worker.name,
            worker.runs,
            round(worker.seconds, 2),
            worker.runs / worker.seconds if worker.seconds > 0 else None,
            rate(worker.cache_hits / worker.runs if worker.runs else None),
            "failed" if worker.error else "ok",
        ]
        for worker in outcome.workers
    ]
    console.print(table(None, ["worker", "runs", "seconds", "runs/s", "hit rate", "status"], rows))
    console.print(f"check in SQL: [bold]{summary['count_sql']};[/bold]", highlight=False)
