"""Section registry, the progress display, and writing the results."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.context import Bench
from benchmarks.report import Results, Row, ratio_text, write
from benchmarks.services import (
    ENV_POSTGRES_URL,
    ENV_REDIS_URL,
    Services,
    Unavailable,
    default_postgres_url,
    default_redis_url,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# name -> (what it measures, "module:function", extra argument or None). Modules are imported
# only when their section runs, so one section's missing dependency cannot stop the others.
SECTIONS: dict[str, tuple[str, str, str | None]] = {
    "memory-cache": ("in-process cache vs cachetools.TTLCache", "sec_memory:run", None),
    "redis-cache": ("Redis cache vs raw GET / SET PX", "sec_redis:run_cache", None),
    "redis-windows": ("Redis windows vs raw GET", "sec_redis:run_windows", None),
    "lessons-sqlite": ("candidates + match on SQLite, two sizes", "sec_lessons:run", "sqlite"),
    "lessons-postgres": (
        "candidates + match on PostgreSQL, two sizes",
        "sec_lessons:run",
        "postgresql",
    ),
    "knowledge-sqlite": (
        "knowledge base search and ingestion on SQLite",
        "sec_knowledge:run",
        "sqlite",
    ),
    "knowledge-postgres": (
        "knowledge base search and ingestion on PostgreSQL",
        "sec_knowledge:run",
        "postgresql",
    ),
    "engine-embedded": ("run() on SQLite + memory", "sec_engine:run", "embedded"),
    "engine-shared": ("run() on PostgreSQL + Redis", "sec_engine:run", "shared"),
    "engine-async": ("AsyncContextEngine: throughput, loop stalls", "sec_async:run", None),
    "fleet": ("1, 2, 4 processes on PostgreSQL + Redis", "sec_fleet:run", None),
    "import-sqlite": ("an agent's runs during a 100k-lesson SQLite import", "sec_import:run", None),
    "import-sqlite-shared-keys": (
        "an agent's runs during a 100k-lesson import of shared scope keys, and after it",
        "sec_import:run_shared_keys",
        None,
    ),
    "service": ("/v1/run over HTTP vs in process; 32 clients", "sec_service:run", None),
    "result-shape": ("a run's answer as RunJson vs the dataclass dump", "sec_results:run", None),
    "traces-sqlite": (
        "lessons stats, report by lesson and the cost of a trace on SQLite",
        "sec_traces:run",
        "sqlite",
    ),
    "traces-postgres": (
        "lessons stats, report by lesson and the cost of a trace on PostgreSQL",
        "sec_traces:run",
        "postgresql",
    ),
    "console": ("console overview over 1M runs vs the report API", "sec_console:run", None),
    "memory-footprint": ("bytes per cached entry vs cachetools", "sec_memory:run_footprint", None),
    "retrieval-quality": (
        "nDCG@10 / recall@100 of analyzers, WordLlama and hybrid vs bm25s; exact top-k speed",
        "sec_retrieval_quality:run",
        None,
    ),
    # Last: it leaves the OpenTelemetry SDK installed as the process's tracer provider.
    "tracing": ("run() with tracing off, on (API only), on (SDK)", "sec_tracing:run", None),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="contextstore benchmarks: ratios against baselines measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer rounds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    parser.add_argument(
        "--sections", default="", help="comma-separated sections to run (default: all)"
    )
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    parser.add_argument(
        "--postgres-url",
        default=default_postgres_url(),
        help="admin URL the scratch databases are created from and dropped through "
        f"(env {ENV_POSTGRES_URL}; default %(default)s)",
    )
    parser.add_argument(
        "--redis-url",
        default=default_redis_url(),
        help="Redis URL; its database is the benchmarks' own, keys are deleted at the end "
        f"(env {ENV_REDIS_URL}; default %(default)s)",
    )
    return parser.parse_args(argv)


def _section_function(spec: str, argument: str | None) -> Callable[[Bench], list[Row]]:
    module_name, function_name = spec.split(":")
    module = importlib.import_module(f"benchmarks.{module_name}")
    function: Callable[..., list[Row]] = getattr(module, function_name)
    if argument is None:
        return function
    return lambda bench: function(bench, argument)


def _service_versions(services: Services, names: list[str]) -> str:
    parts = []
    if any(n in names for n in ("lessons-postgres", "engine-shared", "fleet", "service")):
        try:
            import sqlalchemy as sa

            services.require_postgres()
            engine = sa.create_engine(services.postgres_admin_url)
            with engine.connect() as connection:
                version = connection.execute(sa.text("SHOW server_version")).scalar_one()
            engine.dispose()
            parts.append(f"PostgreSQL {str(version).split()[0]}")
        except Exception:
            parts.append("PostgreSQL unreachable")
    if any(n in names for n in ("redis-cache", "redis-windows", "engine-shared", "fleet")):
        try:
            client = services.redis_client()
            parts.append(f"Redis {client.info('server')['redis_version']}")
        except Exception:
            parts.append("Redis unreachable")
    import sqlite3

    parts.append(f"SQLite {sqlite3.sqlite_version}")
    return " · ".join(parts)


def _summary_table(rows: list[Row]) -> Table:
    result = Table(title="contextstore benchmarks", title_justify="left", header_style="bold")
    for name in ("section", "measurement", "contextstore", "baseline", "ratio", "target", "met"):
        result.add_column(name, justify="right" if name in ("contextstore", "ratio") else "left")
    previous = None
    for row in rows:
        met = "" if row.met is None else ("[green]yes[/green]" if row.met else "[red]NO[/red]")
        baseline = f"{row.baseline_name}: {row.baseline}" if row.baseline else row.baseline_name
        result.add_row(
            row.section if row.section != previous else "",
            row.name,
            row.ours,
            baseline,
            ratio_text(row.ratio),
            row.target or "—",
            met,
        )
        previous = row.section
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    if args.list:
        for name, (what, _, _) in SECTIONS.items():
            console.print(f"{name:18} {what}", highlight=False)
        return 0
    names = [n.strip() for n in args.sections.split(",") if n.strip()] or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        err.print(f"unknown section(s): {', '.join(unknown)}; see --list", highlight=False)
        return 2
    started = time.perf_counter()
    services = Services(args.postgres_url, args.redis_url)
    results = Results(
        meta={
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(),
            "quick": args.quick,
            "sections": names,
        }
    )
    failed = False
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    try:
        results.meta["services"] = _service_versions(services, names)
        with progress:
            overall = progress.add_task("sections", total=len(names))
            status = progress.add_task("", total=None)

            def say(text: str) -> None:
                progress.update(status, description=f"  [dim]{text}[/dim]")

            bench = Bench(quick=args.quick, services=services, say=say, notes=results.notes)
            for name in names:
                progress.update(overall, description=f"[bold]{name}[/bold]")
                _, spec, argument = SECTIONS[name]
                section_started = time.perf_counter()
                try:
                    results.rows.extend(_section_function(spec, argument)(bench))
                except Unavailable as exc:
                    line = f"{name}: skipped — {exc}"
                    results.skipped.append(line)
                    progress.console.print(f"[yellow]{line}[/yellow]", highlight=False)
                except Exception as exc:  # one section's failure must not lose the others
                    failed = True
                    line = f"{name}: failed — {type(exc).__name__}: {exc}"
                    results.skipped.append(line)
                    progress.console.print(f"[red]{line}[/red]", highlight=False)
                    if os.environ.get("BENCH_TRACEBACK"):
                        progress.console.print_exception()
                else:
                    progress.console.print(
                        f"[green]✓[/green] {name} ({time.perf_counter() - section_started:.0f} s)",
                        highlight=False,
                    )
                progress.advance(overall)
    finally:
        problems = services.close()
        for problem in problems:
            err.print(f"[yellow]cleanup: {problem}[/yellow]", highlight=False)
    results.meta["seconds"] = time.perf_counter() - started
    markdown, data = write(results, args.out)
    console.print(_summary_table(results.rows))
    for line in results.skipped:
        console.print(line, highlight=False)
    met = [row.met for row in results.rows if row.met is not None]
    console.print(
        f"targets met: {sum(met)} of {len(met)} · {results.meta['seconds']:.0f} s · "
        f"written {markdown} and {data}",
        highlight=False,
    )
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
