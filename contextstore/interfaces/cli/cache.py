"""``contextstore cache stats|clear``: inspect or empty a namespace's shared context cache.

The cache is Redis's when ``--redis-url`` / ``CONTEXTSTORE_REDIS_URL`` is set; without one,
the cache lives in each process's memory and a command can only show its own, empty, cache
(it says so). Redis unreachable: one ``error:`` line on stderr, exit status 1. A bad URL or
namespace: the same, naming it (password hidden).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.markup import escape

from contextstore.backends.redis.client import FaultPolicy, hide_password
from contextstore.backends.redis.client import logger as redis_logger
from contextstore.errors import ContextStoreError
from contextstore.interfaces.cli.common import console, exit_status, fail, print_json, ratio, table
from contextstore.interfaces.cli.options import Json, Namespace, RedisUrl, open_store
from contextstore.store.sync import Store

app = typer.Typer(
    help="Inspect or empty the shared context cache of a namespace.", no_args_is_help=True
)

MEMORY_NOTE = (
    "no Redis URL: {what} in each process's memory, so namespace {namespace!r} has nothing "
    "shared to show here (set --redis-url or CONTEXTSTORE_REDIS_URL)"
)


@contextmanager
def shared_store(redis_url: str | None, namespace: str | None) -> Iterator[Store]:
    """The store for a cache or adaptive command; refusals become one line and exit 1.

    The Redis client's own outage WARNINGs are held back meanwhile: these commands do not
    fall back to process memory as a run does, they stop with one ``error:`` line
    (``check_reachable``), and a WARNING before it would only repeat it.
    """
    level = redis_logger.level
    redis_logger.setLevel(logging.ERROR)
    try:
        with open_store(None, redis_url, namespace) as store:
            yield store
    except ContextStoreError as exc:
        fail(str(exc), code=exit_status(exc))
    finally:
        redis_logger.setLevel(level)


def where(store: Store) -> dict[str, Any]:
    """Where the shared state lives, for headers and JSON (password hidden)."""
    url = store.config.redis_url
    return {
        "namespace": store.namespace,
        "backend": "redis" if url else "memory",
        "redis_url": hide_password(url) if url else None,
    }


def check_reachable(store: Store, part: object, errors_before: int = 0) -> None:
    """Exit 1 if ``part`` (a Redis cache or windows) failed to reach Redis during the command."""
    fault = getattr(part, "fault", None)
    if isinstance(fault, FaultPolicy) and fault.errors > errors_before:
        fail(f"Redis at {where(store)['redis_url']} is unreachable; nothing was read or changed")


@app.command("stats")
def stats(
    redis_url: RedisUrl = None, namespace: Namespace = None, json_output: Json = False
) -> None:
    """Entries, capacity, TTL, hits, misses and hit rate, shared by the whole namespace.

    An empty cache with no lookups yet, or no Redis at all, is one line (--json: the same
    object, with zeros).
    """
    with shared_store(redis_url, namespace) as store:
        figures = store.cache.stats()
        check_reachable(store, store.cache)
        location = where(store)
    figures.pop("errors", None)
    if json_output:
        # The "42.0%" string stays for compatibility (docs/decisions/0018); hit_ratio is the same
        # figure as a number (0.42), null before any request.
        lookups = figures["hits"] + figures["misses"]
        print_json({**location, **figures, "hit_ratio": ratio(figures["hits"], lookups)})
        return
    if location["backend"] == "memory":
        one_line(memory_note(location))
        return
    if figures["size"] == 0 and figures["hits"] == 0 and figures["misses"] == 0:
        one_line(f"the context cache of {describe(location)} is empty: no entries, no lookups")
        return
    _header("Context cache", location)
    rows: list[list[Any]] = [
        ["entries", figures["size"]],
        ["max entries", figures["max_size"]],
        ["ttl (s)", figures["ttl_sec"]],
        ["hits", figures["hits"]],
        ["misses", figures["misses"]],
        ["hit rate", figures["hit_rate"]],
    ]
    console.print(table(None, ["", "value"], rows))


@app.command("clear")
def clear(
    redis_url: RedisUrl = None, namespace: Namespace = None, json_output: Json = False
) -> None:
    """Remove every cached context of the namespace (the hit/miss counters are kept)."""
    with shared_store(redis_url, namespace) as store:
        before = store.cache.stats()["size"]
        check_reachable(store, store.cache)
        store.cache.clear()
        check_reachable(store, store.cache)
        location = where(store)
    if json_output:
        print_json({**location, "cleared": before})
        return
    if location["backend"] == "memory":
        one_line(memory_note(location))
        return
    if before == 0:
        one_line(f"cleared 0 entries: the context cache of {describe(location)} was empty")
        return
    _header("Context cache", location)
    console.print(f"cleared {before:,} {'entry' if before == 1 else 'entries'}", highlight=False)


def describe(location: dict[str, Any]) -> str:
    """``namespace 'x' at redis://…`` (password hidden)."""
    return f"namespace {location['namespace']!r} at {location['redis_url']}"


def memory_note(location: dict[str, Any], what: str = "the cache lives") -> str:
    return MEMORY_NOTE.format(what=what, namespace=location["namespace"])


def one_line(text: str) -> None:
    """An empty result: one line, never wrapped, user text never read as markup."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def _header(title: str, location: dict[str, Any]) -> None:
    shared = location["redis_url"] or "process memory"
    console.print(
        f"[bold]{title}[/bold] · namespace {escape(location['namespace'])} · {escape(shared)}",
        highlight=False,
    )
