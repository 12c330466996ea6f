"""``contextstore keys add|list|revoke``: manage the API keys ``contextstore serve`` checks.

They live in the key file ``--file``, else ``$CONTEXTSTORE_API_KEYS``; with neither, in the
SQL database (``--database-url``, else ``$CONTEXTSTORE_DATABASE_URL``) that every server on
it shares. A new key is printed once, alone on
the last line of standard output (everything else goes to stderr or before it), so scripts
can take it with ``tail -n 1``; only its salted hash is stored. A running server sees every
change on its next request.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from contextstore.config import ContextEngineConfig
from contextstore.interfaces.apikeys import ENV_API_KEYS, ROLES, KeyStore, keys_path
from contextstore.interfaces.cli.common import cli_errors, console, console_err, plural
from contextstore.interfaces.cli.options import (
    AllNamespaces,
    DatabaseUrl,
    Namespace,
    describe_namespace,
    key_namespace,
    report_namespace,
)
from contextstore.interfaces.cli.output import Format, chosen_format, emit_rows

app = typer.Typer(
    help="API keys for 'contextstore serve': add, list, revoke.", no_args_is_help=True
)

_COLUMNS = ["id", "namespace", "role", "created_at", "label"]
ROLE_HELP = (
    f"{', '.join(ROLES)}: agent runs, matches and searches; admin administers its namespace; "
    "owner the database (lessons, every namespace)"
)

KeyFile = Annotated[
    Path | None,
    typer.Option(
        "--file",
        help="Key file \\[env CONTEXTSTORE_API_KEYS; unset: the keys of --database-url]",
        show_default=False,
    ),
]


@contextmanager
def opened(key_file: Path | None, database_url: str | None) -> Iterator[KeyStore]:
    """The key file if one is named (``--file`` or the environment), else the database's keys."""
    from contextstore.interfaces.sql_keys import key_store

    path = keys_path(key_file) if key_file is not None or os.environ.get(ENV_API_KEYS) else None
    url = database_url or ContextEngineConfig.from_env().database_url
    store = key_store(path, url)
    try:
        yield store
    finally:
        store.close()


@app.command("add")
def add(
    role: Annotated[str, typer.Option("--role", help=ROLE_HELP)],
    namespace: Namespace = None,
    label: Annotated[str, typer.Option("--label", help="A note shown by 'keys list'")] = "",
    key_file: KeyFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a key for one namespace (--namespace, else CONTEXTSTORE_NAMESPACE; required).

    The key is printed once, alone on the last line of standard output.
    """
    chosen = key_namespace(namespace)
    with cli_errors(), opened(key_file, database_url) as store:
        key, entry = store.add(chosen, role, label=label)
    console_err.print(
        f"added key {entry.id} (namespace {entry.namespace}, role {entry.role}) to {store.where}; "
        "it is shown only now",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    print(key, flush=True)


@app.command("list")
def list_keys(
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    key_file: KeyFile = None,
    database_url: DatabaseUrl = None,
    output: Format = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List the keys (id, namespace, role, creation time, label); never a secret.

    The keys of --namespace, else CONTEXTSTORE_NAMESPACE, else of every namespace.
    """
    fmt = chosen_format(output, as_json)
    chosen = report_namespace(namespace, all_namespaces)
    with cli_errors(), opened(key_file, database_url) as store:
        entries = store.entries()
    rows: list[dict[str, Any]] = [
        {
            "id": e.id,
            "namespace": e.namespace,
            "role": e.role,
            "created_at": e.created_at,
            "label": e.label,
        }
        for e in entries
        if chosen is None or e.namespace == chosen
    ]
    where = "" if chosen is None else f" of {describe_namespace(chosen)}"
    emit_rows(
        fmt,
        f"{plural(len(rows), 'key')}{where} in {store.where}",
        rows,
        columns=_COLUMNS,
        flexible="label",
        identifiers=("id", "namespace"),
        empty=f"no keys{where} in {store.where}",
    )


@app.command("revoke")
def revoke(
    id_or_key: Annotated[str, typer.Argument(help="The id 'keys list' shows, or the key itself")],
    key_file: KeyFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Remove a key; every running server refuses it from its next request on."""
    with cli_errors(), opened(key_file, database_url) as store:
        entry = store.revoke(id_or_key)
    console.print(
        f"revoked key {entry.id} (namespace {entry.namespace}, role {entry.role})",
        highlight=False,
        markup=False,
    )
