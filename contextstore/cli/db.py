"""``contextstore db``: bring the SQL schema up or down with the migrations the package ships.

Same migrations as ``alembic upgrade head`` from the repository root, but needing no
``alembic.ini``: the configuration is built in code, so an installed package can migrate.
"""

from __future__ import annotations

from typing import Annotated

import typer

from contextstore.cli.common import EXIT_FAILURE, cli_errors, console, print_json, table
from contextstore.cli.options import DatabaseUrl, Json, open_store
from contextstore.config import ContextEngineConfig
from contextstore.sql.database import current_revision, downgrade, head_revision, migrate

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
    """List lesson rows readers skip (e.g. a timestamp typed by hand); exit 1 when any."""
    with cli_errors(), open_store(database_url, None, None) as store:
        found = store.lessons.check()
    if as_json:
        print_json([vars(row) for row in found])
    elif found:
        rows = [[row.entity_id, row.column, row.value, row.reason] for row in found]
        title = f"{len(found)} unreadable lesson row(s): fix them in SQL"
        console.print(table(title, ["entity_id", "column", "value", "reason"], rows))
    else:
        console.print("every lesson row reads")
    if found:
        raise typer.Exit(EXIT_FAILURE)
