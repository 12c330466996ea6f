"""``contextstore metrics report|prune``: inspect and trim the durable per-run metrics.

Times on the command line are either a duration back from now (``90s``, ``15m``, ``1h``,
``7d``, ``2w``) or an ISO 8601 timestamp (``2024-05-01``, ``2024-05-01T12:00:00+02:00``;
without an offset it is read as UTC). Bad input prints one ``error:`` line on stderr and
exits with status 2; a database or file failure exits with status 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.metrics.report import (
    GROUPINGS,
    GroupRow,
    MetricsFigures,
    MetricsFilter,
    MetricsReport,
)
from contextstore.backends.sql.metrics.validation import INTENTS
from contextstore.core.filters import choice
from contextstore.errors import ValidationError
from contextstore.interfaces.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    cli_errors,
    console,
    console_err,
    fail,
    print_json,
    table,
)
from contextstore.interfaces.cli.options import (
    AllNamespaces,
    DatabaseUrl,
    Json,
    Namespace,
    describe_namespace,
    tenant_store,
)
from contextstore.interfaces.cli.output import Format, OutputFormat, chosen_format, emit_rows
from contextstore.interfaces.cli.times import (
    DURATION,
    TIME_HELP,
    UNITS,
    Since,
    Until,
    parse_range,
    parse_time,
    when,
)
from contextstore.interfaces.results import rfc3339

app = typer.Typer(
    help="Inspect the durable per-run metrics (query_metrics): reports, optionally plotted, "
    "and pruning by age.",
    no_args_is_help=True,
)


# Plot bucket sizes to choose from, smallest first; the first giving at most MAX_BUCKETS
# points over the range wins, so a plot stays legible whatever the range.
BUCKET_STEPS = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 120

_INTENTS = ", ".join(INTENTS)
WorkerPrefix = Annotated[
    str | None,
    typer.Option(
        "--worker-prefix", help="Only workers whose name starts with this (case-sensitive)"
    ),
]


Grouping = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Also break the runs down by complexity, intent, worker or lesson (included)",
        show_default=False,
    ),
]


@app.command("report")
def report(
    since: Since = None,
    until: Until = None,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    worker_prefix: WorkerPrefix = None,
    complexity: Annotated[
        str | None,
        typer.Option(
            "--complexity", help="Only runs of this complexity: low, medium or high (any case)"
        ),
    ] = None,
    intent: Annotated[
        str | None,
        typer.Option("--intent", help=f"Only runs of this intent: {_INTENTS} (any case)"),
    ] = None,
    cache_hit: Annotated[
        bool | None,
        typer.Option(
            "--cache-hit/--no-cache-hit",
            help="Only cache hits, or only misses (default: both)",
            show_default=False,
        ),
    ] = None,
    lesson: Annotated[
        str | None, typer.Option("--lesson", help="Only runs whose lesson block included this id")
    ] = None,
    by: Grouping = None,
    output: Format = None,
    json_output: Json = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also draw runs, response times, cache hits, guard failures and lessons to "
            "this PNG",
        ),
    ] = None,
    bucket: Annotated[
        str | None,
        typer.Option(
            "--bucket", help="Plot bucket length, e.g. 5m, 1h (default: sized to the runs found)"
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Counts, response-time percentiles, guard-failure and cache-hit rates, lessons.

    Over the namespace's runs (--namespace, else CONTEXTSTORE_NAMESPACE, else default);
    every namespace's with --all-namespaces.

    With --by, a table of the same figures per group; --format plain/csv/json prints just
    those groups, whole.
    """
    fmt = chosen_format(output, json_output)
    start, end = parse_range(since, until)
    if by is not None:
        try:
            by = choice("by", by, GROUPINGS)
        except ValidationError as refused:
            fail(f"--by: {refused.message}", code=EXIT_USAGE)
    if fmt in (OutputFormat.PLAIN, OutputFormat.CSV) and by is None:
        fail(f"--format {fmt.value} lists groups: add --by", code=EXIT_USAGE)
    bucket_seconds = None if bucket is None else _positive_seconds("--bucket", bucket)
    if plot is not None:
        check_plot_path(plot)
    filters = MetricsFilter(
        since=start,
        until=end,
        worker_prefix=worker_prefix,
        complexity=complexity,
        intent=intent,
        cache_hit=cache_hit,
        lesson=lesson,
    )
    quiet = fmt is not OutputFormat.TABLE
    with cli_errors(), tenant_store(database_url, namespace, all_namespaces) as store:
        repository = store.metrics
        result = repository.report(filters, by=by, all_namespaces=all_namespaces)
        if plot is not None:
            _draw(repository, result, plot, bucket_seconds, filters, all_namespaces, quiet=quiet)
    if fmt is OutputFormat.JSON:
        print_json(result.as_dict())
        return
    if fmt is not OutputFormat.TABLE:
        records = [_group_record(group) for group in result.groups]
        emit_rows(fmt, "", records, fields=_GROUP_FIELDS, empty="")
        return
    if result.runs == 0:
        console.print(f"no runs recorded: {_describe(result)}", highlight=False, markup=False)
        return
    console.print(f"[bold]Query metrics[/bold] · {escape(_describe(result))}", highlight=False)
    console.print(overall_table(result))
    console.print(complexity_table(result))
    if by is not None and not result.groups:
        # Grouped by lesson, runs whose blocks included no lesson are in no group.
        console.print(f"By {by}: no group", highlight=False, markup=False)
    elif by is not None:
        console.print(groups_table(result))


@app.command("prune")
def prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help=f"Required. Delete runs recorded before this: {TIME_HELP}",
            show_default=False,
        ),
    ] = None,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count the rows that would be deleted")
    ] = False,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete metrics rows older than a duration (e.g. 30d) or a timestamp; print how many.

    Only the namespace's rows (--namespace, else CONTEXTSTORE_NAMESPACE, else default);
    every namespace's with --all-namespaces.
    """
    # Required, but checked here so a missing value is one line like every other error.
    if older_than is None:
        fail("--older-than is required, e.g. --older-than 30d", code=EXIT_USAGE)
    cutoff = parse_time("--older-than", older_than, datetime.now(UTC))
    assert cutoff is not None  # a given value always parses to a time or fails
    with cli_errors(), tenant_store(database_url, namespace, all_namespaces) as store:
        if dry_run:
            deleted = store.metrics.count(until=cutoff, all_namespaces=all_namespaces)
        else:
            deleted = store.metrics.prune(cutoff, all_namespaces=all_namespaces)
        namespace = None if all_namespaces else store.namespace
    if json_output:
        print_json(
            {
                "deleted": 0 if dry_run else deleted,
                "would_delete": deleted if dry_run else None,
                "cutoff": rfc3339(cutoff),
                "namespace": namespace,
                "dry_run": dry_run,
            }
        )
        return
    scope = f"namespace {namespace!r}" if namespace is not None else "all namespaces"
    verb = "would delete" if dry_run else "deleted"
    rows = "row" if deleted == 1 else "rows"
    console.print(
        f"{verb} {deleted:,} metrics {rows} recorded before "
        f"{cutoff:%Y-%m-%d %H:%M:%S} UTC ({scope})",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


# -- parsing ---------------------------------------------------------------------------------


def _positive_seconds(option: str, text: str) -> int:
    match = DURATION.match(text)
    if not match or int(match.group(1)) == 0:
        fail(
            f"{option}: expected a positive duration like 5m, 1h or 1d, got {text!r}",
            code=EXIT_USAGE,
        )
    return int(match.group(1)) * UNITS[match.group(2).lower()]


def check_plot_path(path: Path) -> None:
    """Refuse, before any query runs, a plot path that cannot become a PNG file."""
    if path.suffix.lower() != ".png":
        fail(f"--plot: {str(path)!r} must end in .png", code=EXIT_USAGE)
    if path.is_dir():
        fail(f"--plot: {str(path)!r} is a directory", code=EXIT_USAGE)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        fail(f"--plot: directory {str(parent)!r} does not exist", code=EXIT_USAGE)
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(f"--plot: {str(path)!r} is not writable", code=EXIT_USAGE)


def choose_bucket(span: timedelta) -> int:
    """The smallest step of ``BUCKET_STEPS`` that gives at most ``MAX_BUCKETS`` buckets."""
    for step in BUCKET_STEPS:
        if span.total_seconds() / step <= MAX_BUCKETS:
            return step
    return BUCKET_STEPS[-1]


# -- output ----------------------------------------------------------------------------------


def _draw(
    repository: MetricsRepository,
    result: MetricsReport,
    path: Path,
    bucket_seconds: int | None,
    filters: MetricsFilter,
    all_namespaces: bool,
    *,
    quiet: bool,
) -> None:
    from contextstore.interfaces.cli.plot import plot_metrics

    if bucket_seconds is None:
        # Sized to the runs actually found, not the requested range: "--since 30d" over one
        # day of data should still plot that day in fine buckets.
        first, last = result.first_recorded_at, result.last_recorded_at
        span = last - first if first is not None and last is not None else timedelta(0)
        bucket_seconds = choose_bucket(span)
    series = repository.series(
        filters, bucket_seconds=bucket_seconds, all_namespaces=all_namespaces
    )
    try:
        written = plot_metrics(series, path)
    except OSError as exc:
        fail(f"--plot: cannot write {str(path)!r}: {exc.strerror or exc}", code=EXIT_FAILURE)
    # With --json, stdout must hold only the JSON document.
    (console_err if quiet else console).print(
        f"plot written to {written}", highlight=False, markup=False, soft_wrap=True
    )


def _describe(result: MetricsReport) -> str:
    parts = [
        describe_namespace(result.namespace),
        f"workers {result.worker_prefix!r}…" if result.worker_prefix else "all workers",
    ]
    if result.complexity is not None:
        parts.append(f"complexity {result.complexity!r}")
    if result.intent is not None:
        parts.append(f"intent {result.intent!r}")
    if result.cache_hit is not None:
        parts.append("cache hits" if result.cache_hit else "cache misses")
    if result.lesson is not None:
        parts.append(f"lesson {result.lesson!r} included")
    if result.since is not None:
        parts.append(f"since {result.since:%Y-%m-%d %H:%M:%S}")
    if result.until is not None:
        parts.append(f"until {result.until:%Y-%m-%d %H:%M:%S}")
    return ", ".join(parts) + (" (UTC)" if result.since or result.until else "")


def _percent(rate: float | None) -> float | None:
    return None if rate is None else 100.0 * rate


_GROUP_FIELDS = ["key", *(f.name for f in fields(MetricsFigures))]


def _group_record(group: GroupRow) -> dict[str, Any]:
    record = group.as_dict()
    return {"key": record.pop("key"), **record}


def groups_table(result: MetricsReport) -> Table:
    """One row per group: runs, p50 and p95, cache hits and guard failures; fits 80 columns."""
    rows = [
        [
            group.key,
            group.runs,
            group.p50_ms,
            group.p95_ms,
            _percent(group.cache_hit_rate),
            _percent(group.guard_failure_rate),
        ]
        for group in result.groups
    ]
    columns = [result.by or "group", "runs", "p50 ms", "p95 ms", "hits %", "guard fail %"]
    grouped = table(f"By {result.by}", columns, rows, identifiers=columns[0], compact=True)
    for column in grouped.columns[1:]:
        column.justify = "right"
    return grouped


def overall_table(result: MetricsReport) -> Table:
    """Figure / value rows for the whole selection."""
    rows: list[list[Any]] = [
        ["runs", result.runs],
        ["first recorded", when(result.first_recorded_at)],
        ["last recorded", when(result.last_recorded_at)],
        ["response time p50 (ms)", result.p50_ms],
        ["response time p95 (ms)", result.p95_ms],
        ["response time p99 (ms)", result.p99_ms],
        ["mean context length (chars)", result.mean_context_length],
        ["guard failures (%)", _percent(result.guard_failure_rate)],
        ["cache hits (%)", _percent(result.cache_hit_rate)],
        ["lessons matched (total)", result.lessons_matched_total],
        ["lessons matched (mean per run)", result.lessons_matched_mean],
        ["lessons included (total)", result.lessons_included_total],
        ["lessons included (mean per run)", result.lessons_included_mean],
    ]
    overall = table("Overall", ["figure", "value"], rows)
    overall.columns[1].justify = "right"
    return overall


def complexity_table(result: MetricsReport) -> Table:
    """The same figures per complexity: one column each for low, medium and high.

    Transposed (figures down, levels across) so it stays legible in an 80-column terminal.
    """
    levels = result.by_complexity
    rows = [[label, *(value(level) for level in levels)] for label, value in _COMPLEXITY_FIGURES]
    by_complexity = table(
        "By complexity", ["figure", *(level.complexity for level in levels)], rows
    )
    # A level without runs shows "—"; keep its number column right-aligned regardless.
    for column in by_complexity.columns[1:]:
        column.justify = "right"
    return by_complexity


_COMPLEXITY_FIGURES: tuple[tuple[str, Callable[[MetricsFigures], Any]], ...] = (
    ("runs", lambda row: row.runs),
    ("response time p50 (ms)", lambda row: row.p50_ms),
    ("response time p95 (ms)", lambda row: row.p95_ms),
    ("response time p99 (ms)", lambda row: row.p99_ms),
    ("mean context length (chars)", lambda row: row.mean_context_length),
    ("guard failures (%)", lambda row: _percent(row.guard_failure_rate)),
    ("cache hits (%)", lambda row: _percent(row.cache_hit_rate)),
    ("lessons matched (mean per run)", lambda row: row.lessons_matched_mean),
    ("lessons included (mean per run)", lambda row: row.lessons_included_mean),
)
