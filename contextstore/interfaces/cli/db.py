"""``contextstore db``: bring the SQL schema up or down with the migrations the package ships.

Same migrations as ``alembic upgrade head`` from the repository root, but needing no
``alembic.ini``: the configuration is built in code, so an installed package can migrate.
"""

from __future__ import annotations

from typing import Annotated

import typer

from contextstore.backends.sql.database import current_revision, downgrade, head_revision, migrate
from contextstore.config import ContextEngineConfig
from contextstore.interfaces.cli.common import (
    EXIT_FAILURE,
    cli_errors,
    console,
    plural,
    print_json,
    table,
)
from contextstore.interfaces.cli.options import DatabaseUrl, Json, open_store

app = typer.Typer(
    help="The SQL schema: bring it up or down with the shipped migrations, and inspect it.",
    no_args_is_help=True,
)


def _url(database_url: str | None) -> str:
    return database_url or ContextEngineConfig.from_env().database_url


@app.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision")] = "head",
    database_url: DatabaseUrl = None,
) -> None:
    """Upgrade the schema to REVISION (default: head). Safe to run concurrently."""
    with cli_errors():
        url = _url(database_url)
        migrate(url, revision)
        console.print(f"at revision {current_revision(url) or 'base'}")


@app.command("downgrade")
def downgrade_command(
    revision: Annotated[str, typer.Argument(help="Target revision ('base' removes everything)")],
    database_url: DatabaseUrl = None,
) -> None:
    """Downgrade the schema to REVISION; 'base' drops every contextstore table and trigger."""
    with cli_errors():
        url = _url(database_url)
        downgrade(url, revision)
        console.print(f"at revision {current_revision(url) or 'base'}")


@app.command("current")
def current(database_url: DatabaseUrl = None) -> None:
    """Print the schema revision (or 'base' when never migrated) and the package's head."""
    with cli_errors():
        revision = current_revision(_url(database_url)) or "base"
        console.print(f"{revision} (head is {head_revision()})")


@app.command("check")
def check(database_url: DatabaseUrl = None, as_json: Json = False) -> None:
    """List lesson rows readers skip (e.g. a timestamp typed by hand); exit 1 when any.

    Also says how the knowledge base searches vectors: pgvector (HNSW), sqlite-vec, or an
    exact scan in Python where neither is there."""
    with cli_errors(), open_store(database_url, None, None) as store:
        found = store.lessons.check()
        vectors = store.knowledge.describe_vectors()
    if as_json:
        print_json([vars(row) for row in found])
    elif found:
        rows = [[row.entity_id, row.column, row.value, row.reason] for row in found]
        title = f"{plural(len(found), 'unreadable lesson row')}: fix them in SQL"
        console.print(table(title, ["entity_id", "column", "value", "reason"], rows))
    else:
        console.print("every lesson row reads")
    if not as_json:
        console.print(f"vector search: {vectors}", markup=False, highlight=False, soft_wrap=True)
    if found:
        raise typer.Exit(EXIT_FAILURE)


@app.command("grant-service-role")
def grant_service_role_command(
    role: Annotated[str, typer.Argument(help="An existing PostgreSQL role that owns nothing")],
    database_url: DatabaseUrl = None,
) -> None:
    """Grant ROLE what 'contextstore serve' needs, and no more (PostgreSQL; run as the owner).

    ROLE reads every table, writes lessons, documents and metrics, and only reads the audit:
    it cannot switch a trigger off or write history. Refused for a superuser or a role that
    owns, or may act as the owner of, the schema or a table in it.
    """
    from contextstore.backends.sql.roles import grant_service_role

    with cli_errors():
        for statement in grant_service_role(_url(database_url), role):
            console.print(statement, markup=False, highlight=False)
