"""``contextstore fleet``: N real agent processes sharing one store, then the fleet's report.

The processes are started and watched by ``interfaces.fleet.run_fleet``; this command checks
the options, seeds the sample lessons and loads the sample documents into the namespace's
knowledge base (once: a later fleet finds them unchanged), draws one progress bar per worker
from the library's progress callback, and prints the report read back from the SQL metrics
for this fleet only (workers named ``fleet-<id>-<n>``), so it counts what was made durable,
not what the workers claim.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contextstore.backends.sql.database import normalise_url
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.metrics.report import MetricsFilter
from contextstore.config import ContextEngineConfig
from contextstore.errors import ConfigurationError
from contextstore.interfaces.cli.common import (
    EXIT_USAGE,
    console,
    console_err,
    fail,
    format_cell,
    print_json,
    table,
)
from contextstore.interfaces.cli.options import DatabaseUrl, Json, Namespace, RedisUrl, open_store
from contextstore.interfaces.fleet import (
    MAX_WORKERS,
    FleetOutcome,
    FleetSpec,
    WorkerOutcome,
    load_sample_corpus,
    new_fleet_id,
    run_fleet,
    shareable_database_url,
    worker_name,
    worker_prefix,
)
from contextstore.sample_data import load_lessons

__all__ = ["fleet"]


def fleet(
    workers: Annotated[
        int, typer.Option("--workers", help=f"Agent processes to start (1–{MAX_WORKERS})")
    ] = 4,
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
    if not 1 <= workers <= MAX_WORKERS:
        fail(f"--workers must be 1–{MAX_WORKERS}, got {workers}", code=EXIT_USAGE)
    if queries < 1:
        fail(f"--queries must be at least 1, got {queries}", code=EXIT_USAGE)
    with open_store(database_url, redis_url, namespace) as store:
        try:
            database = shareable_database_url(store.config.database_url)
        except ConfigurationError as exc:
            fail(str(exc), code=EXIT_USAGE)
        fallback = _fallback_note(store.config, database)
        if fallback:
            err.print(f"[yellow]note:[/yellow] {fallback}", highlight=False)
        seeded = store.lessons.import_records(load_lessons())
        corpus = load_sample_corpus(store)
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
            f"{seeded.updated} updated, {seeded.unchanged} unchanged · sample documents: "
            f"{corpus.added} added, {corpus.updated} updated, {corpus.unchanged} unchanged",
            highlight=False,
        )
        outcome = _run_with_progress(spec, workers, out)
        workers_of_fleet = MetricsFilter(worker_prefix=prefix)
        report = store.metrics.report(workers_of_fleet)
        count = store.metrics.count(workers_of_fleet)
    expected = workers * queries
    count_sql = f"SELECT count(*) FROM query_metrics WHERE worker LIKE '{prefix}%'"
    runs_per_second = report.runs / outcome.wall_seconds if outcome.wall_seconds > 0 else None
    summary: dict[str, Any] = {
        "fleet_id": spec.fleet_id,
        "worker_prefix": prefix,
        "sample_documents": {
            "added": corpus.added,
            "updated": corpus.updated,
            "unchanged": corpus.unchanged,
        },
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
        fail(f"SQL holds {report.runs} runs for fleet {spec.fleet_id}, expected {expected}")


def _fallback_note(config: ContextEngineConfig, database_url: str) -> str | None:
    """One line saying which shared state is not configured and what stands in for it."""
    url = normalise_url(database_url)
    shared_file = dialect_of(url.get_backend_name()).is_file
    where = f"the SQLite file {url.database} (WAL)"
    if shared_file and config.redis_url is None:
        return (
            f"no PostgreSQL or Redis configured: the workers share {where}, and each keeps "
            "its own process-memory cache and adaptive windows"
        )
    if config.redis_url is None:
        return (
            "no Redis configured: each worker keeps its own process-memory cache and "
            "adaptive windows"
        )
    if shared_file:
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
    names = [worker_name(spec.fleet_id, index) for index in range(workers)]
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
