"""``contextstore adaptive report``: the adaptive windows of a namespace, as the fleet sees them.

Shared through Redis when ``--redis-url`` / ``CONTEXTSTORE_REDIS_URL`` is set; without one
the windows are per process and this command can only show its own, empty ones (it says so).
Redis unreachable: one ``error:`` line on stderr, exit status 1.
"""

from __future__ import annotations

from typing import Any

import typer

from contextstore.engine.adaptive import AdaptiveLearningSystem
from contextstore.interfaces.cli.cache import (
    _header,
    check_reachable,
    describe,
    memory_note,
    one_line,
    shared_store,
    where,
)
from contextstore.interfaces.cli.common import console, percent, print_json, table
from contextstore.interfaces.cli.options import Json, Namespace, RedisUrl

app = typer.Typer(help="Inspect the adaptive rolling windows of a namespace.", no_args_is_help=True)


@app.command("report")
def report(
    redis_url: RedisUrl = None, namespace: Namespace = None, json_output: Json = False
) -> None:
    """Total runs, and means over the last 100: response ms, context length, chunks, failures.

    No run recorded yet, or no Redis at all, is one line (--json: the same object, with
    zero counts and null means). The names are the metrics report's: runs, mean_*.
    """
    with shared_store(redis_url, namespace) as store:
        system = AdaptiveLearningSystem(store.config, windows=store.windows)
        figures = system.get_performance_report()
        check_reachable(store, store.windows)
        location = where(store)
    if json_output:
        print_json({**location, **figures})
        return
    if location["backend"] == "memory":
        one_line(memory_note(location, "the windows live"))
        return
    if figures["runs"] == 0:
        one_line(f"no runs recorded in the adaptive windows of {describe(location)}")
        return
    _header("Adaptive windows", location)
    rows: list[list[Any]] = [
        ["runs", figures["runs"]],
        ["samples (runs in the window)", figures["samples"]],
        ["mean_response_ms", figures["mean_response_ms"]],
        ["mean_context_length (chars)", figures["mean_context_length"]],
        ["mean_chunk_count", figures["mean_chunk_count"]],
        ["guard_failure_rate", percent(_fraction(figures["guard_failure_rate"]))],
    ]
    console.print(table(None, ["", "value"], rows))


def _fraction(value: float | int | None) -> float | None:
    return None if value is None else float(value)
