"""``contextstore db``: bring the SQL schema up or down with the migrations the package ships.

Same migrations as ``alembic upgrade head`` from the repository root, but needing no
``alembic.ini``: the configuration is built in code, so an installed package can migrate.
"""

from __future__ import annotations

from typing import Annotated

import typer

from contextstore.cli.common import cli_errors, console
from contextstore.cli.options import DatabaseUrl
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
