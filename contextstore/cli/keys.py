"""``contextstore keys add|list|revoke``: manage the API key file ``contextstore serve`` reads.

The file is ``--file``, else ``$CONTEXTSTORE_API_KEYS``. A new key is printed once, alone on
the last line of standard output (everything else goes to stderr or before it), so scripts
can take it with ``tail -n 1``; only its salted hash is stored. A running server sees every
change on its next request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from contextstore.apikeys import ROLES, add_key, keys_path, read_entries, revoke_key
from contextstore.cli.common import cli_errors, console, console_err
from contextstore.cli.options import (
    AllNamespaces,
    Namespace,
    describe_namespace,
    key_namespace,
    report_namespace,
)
from contextstore.cli.output import Format, chosen_format, emit_rows

app = typer.Typer(
    help="API keys for 'contextstore serve': add, list, revoke.", no_args_is_help=True
)

_COLUMNS = ["id", "namespace", "role", "created_at", "label"]

KeyFile = Annotated[
    Path | None,
    typer.Option("--file", help="Key file \\[env CONTEXTSTORE_API_KEYS]", show_default=False),
]


@app.command("add")
def add(
    role: Annotated[str, typer.Option("--role", help=f"{' or '.join(ROLES)}")],
    namespace: Namespace = None,
    label: Annotated[str, typer.Option("--label", help="A note shown by 'keys list'")] = "",
    key_file: KeyFile = None,
) -> None:
    """Create a key for one namespace (--namespace, else CONTEXTSTORE_NAMESPACE; required).

    The key is printed once, alone on the last line of standard output.
    """
    chosen = key_namespace(namespace)
    with cli_errors():
        path = keys_path(key_file)
        key, entry = add_key(path, chosen, role, label=label)
    console_err.print(
        f"added key {entry.id} (namespace {entry.namespace}, role {entry.role}) to {path}; "
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
    output: Format = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List the keys (id, namespace, role, creation time, label); never a secret.

    The keys of --namespace, else CONTEXTSTORE_NAMESPACE, else of every namespace.
    """
    fmt = chosen_format(output, as_json)
    chosen = report_namespace(namespace, all_namespaces)
    with cli_errors():
        path = keys_path(key_file)
        entries = read_entries(path)
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
        f"{len(rows)} key(s){where} in {path}",
        rows,
        columns=_COLUMNS,
        flexible=("label", "namespace"),
        empty=f"no keys{where} in {path}",
    )


@app.command("revoke")
def revoke(
    id_or_key: Annotated[str, typer.Argument(help="The id 'keys list' shows, or the key itself")],
    key_file: KeyFile = None,
) -> None:
    """Remove a key; a running server refuses it from its next request on."""
    with cli_errors():
        entry = revoke_key(keys_path(key_file), id_or_key)
    console.print(
        f"revoked key {entry.id} (namespace {entry.namespace}, role {entry.role})",
        highlight=False,
        markup=False,
    )
