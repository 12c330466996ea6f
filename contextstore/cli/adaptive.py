"""``contextstore adaptive report``: the adaptive windows of a namespace, as the fleet sees them.

Shared through Redis when ``--redis-url`` / ``CONTEXTSTORE_REDIS_URL`` is set; without one
the windows are per process and this command can only show its own, empty ones (it says so).
Redis unreachable: one ``error:`` line on stderr, exit status 1.
"""

from __future__ import annotations

from typing import Any

import typer

from contextstore.adaptive.system import AdaptiveLearningSystem
from contextstore.cli.cache import (
    _header,
    check_reachable,
    describe,
    memory_note,
    one_line,
    shared_store,
    where,
)
from contextstore.cli.common import console, print_json, table
from contextstore.cli.options import Json, Namespace, RedisUrl

app = typer.Typer(help="Inspect the adaptive rolling windows of a namespace.", no_args_is_help=True)


@app.command("report")
def report(
    redis_url: RedisUrl = None, namespace: Namespace = None, json_output: Json = False
) -> None:
    """Total runs, and means over the last 100: response ms, context length, chunks, failures.

    No run recorded yet, or no Redis at all, is one line (--json: the same object, zeros).
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
    if figures["total_queries"] == 0:
        one_line(f"no runs recorded in the adaptive windows of {describe(location)}")
        return
    _header("Adaptive windows", location)
    rows: list[list[Any]] = [
        ["total runs", figures["total_queries"]],
        ["runs in the window", figures["samples"]],
        ["mean response (ms)", figures["avg_response_ms"]],
        ["mean context length (chars)", figures["avg_context_length"]],
        ["mean chunks", figures["avg_chunk_count"]],
        ["guard failure rate", f"{100.0 * figures['guard_failure_rate']:.1f}%"],
    ]
    console.print(table(None, ["", "value"], rows))
