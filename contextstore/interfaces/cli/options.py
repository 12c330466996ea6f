"""Options several commands share, and opening the store from them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from contextstore.interfaces.cli.common import EXIT_USAGE, fail
from contextstore.store.sync import Store, connect

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQL database URL \\[env CONTEXTSTORE_DATABASE_URL; default sqlite:///contextstore.db]",
        show_default=False,
    ),
]
RedisUrl = Annotated[
    str | None,
    typer.Option(
        "--redis-url",
        help="Redis URL \\[env CONTEXTSTORE_REDIS_URL; default: process memory]",
        show_default=False,
    ),
]
NAMESPACE_HELP = (
    "Namespace \\[env CONTEXTSTORE_NAMESPACE; unset: 'default', except every namespace for "
    "keys list]"
)
Namespace = Annotated[
    str | None,
    typer.Option("--namespace", help=NAMESPACE_HELP, show_default=False),
]
"""The one ``--namespace`` option: every command touching a namespace's state takes it, and
resolves it with ``CONTEXTSTORE_NAMESPACE`` as the fallback — through ``open_store`` (else
``default``; the metrics commands too, which reach every namespace only with
``--all-namespaces``), ``report_namespace`` (else every namespace: ``keys list``) or
``key_namespace`` (else an error)."""
AllNamespaces = Annotated[
    bool,
    typer.Option(
        "--all-namespaces", help="Every namespace, even when CONTEXTSTORE_NAMESPACE is set"
    ),
]
Tags = Annotated[list[str] | None, typer.Option("--tag", "-t", help="Scope tag (repeatable)")]
Entities = Annotated[
    list[str] | None, typer.Option("--entity", "-e", help="Scope entity id (repeatable)")
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")]
MissingOk = Annotated[
    bool,
    typer.Option("--missing-ok", help="Succeed (exit 0) when there is nothing to delete"),
]


@contextmanager
def jsonl_file(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading in binary (``-``: standard input), for a JSON Lines
    reader to take a bounded line at a time: an invalid UTF-8 line is reported by its
    number, and an overlong one is refused without being read whole."""
    if str(path) == "-":
        yield sys.stdin.buffer
        return
    with path.open("rb") as handle:
        yield handle


def open_store(database_url: str | None, redis_url: str | None, namespace: str | None) -> Store:
    return connect(database_url=database_url, redis_url=redis_url, namespace=namespace)


def describe_store(store: Store) -> str:
    """One line saying where the shared state lives, with any password hidden."""
    from contextstore.backends.urls import mask_url

    database = mask_url(store.config.database_url)
    redis_url = store.config.redis_url
    shared = mask_url(redis_url) if redis_url else "process memory"
    return f"SQL {database} · cache and windows: {shared} · namespace {store.namespace}"


def tenant_store(database_url: str | None, namespace: str | None, all_namespaces: bool) -> Store:
    """The store whose metrics a command reads or prunes: of ``--namespace``, else
    ``CONTEXTSTORE_NAMESPACE``, else ``default``; the command passes ``all_namespaces`` on,
    so only ``--all-namespaces`` reaches another tenant's rows."""
    if all_namespaces and namespace is not None:
        fail("--namespace and --all-namespaces contradict each other", code=EXIT_USAGE)
    return open_store(database_url, None, namespace)


def report_namespace(namespace: str | None, all_namespaces: bool) -> str | None:
    """The namespace a report covers: ``--namespace``, else ``CONTEXTSTORE_NAMESPACE``, else
    every namespace (``None``); ``--all-namespaces`` always means every namespace."""
    if all_namespaces:
        if namespace is not None:
            fail("--namespace and --all-namespaces contradict each other", code=EXIT_USAGE)
        return None
    return namespace if namespace is not None else configured_namespace()


def key_namespace(namespace: str | None) -> str:
    """The namespace a new API key reaches: ``--namespace``, else ``CONTEXTSTORE_NAMESPACE``;
    with neither, a usage error (a key for ``default`` by accident would be worse)."""
    chosen = namespace if namespace is not None else configured_namespace()
    if chosen is None:
        fail("--namespace is required (or set CONTEXTSTORE_NAMESPACE)", code=EXIT_USAGE)
    return chosen


def configured_namespace() -> str | None:
    """``CONTEXTSTORE_NAMESPACE``, else ``store.namespace`` of ``contextstore.toml``, else
    ``None`` (the default namespace was not chosen by anyone)."""
    from contextstore.config.sources import load_settings

    namespace = load_settings(os.environ).resolved["store.namespace"]
    return None if namespace.source == "default" else str(namespace.value)


def describe_namespace(namespace: str | None) -> str:
    return "all namespaces" if namespace is None else f"namespace {namespace!r}"
