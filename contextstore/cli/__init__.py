"""The ``contextstore`` command line: thin — it parses, calls the library, prints.

Each command group lives in its own module and is registered here. Any ``ContextStoreError``
(and a few expected OS errors) becomes one red line on stderr and a non-zero exit status,
never a traceback.
"""

from __future__ import annotations

import logging
import sys

import typer

from contextstore.cli import adaptive, cache, db, demo, fleet, lessons, metrics
from contextstore.cli.common import cli_errors, console_err

app = typer.Typer(
    name="contextstore",
    help="One shared, durable context layer for fleets of LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("demo")(demo.demo)
app.command("run")(demo.run)
app.command("match")(demo.match_command)
app.command("fleet")(fleet.fleet)
app.add_typer(lessons.app, name="lessons")
app.add_typer(metrics.app, name="metrics")
app.add_typer(db.app, name="db")
app.add_typer(cache.app, name="cache")
app.add_typer(adaptive.app, name="adaptive")


def main() -> None:
    """Console-script entry point."""
    # The library logs (guard warnings, Redis outages) through logging; on the command line
    # they are one line each on stderr, never mixed into stdout's tables or JSON.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # Commands handle their own refusals; this is the backstop so nothing ever ends in a
    # traceback, whichever command raised.
    try:
        with cli_errors():
            app(standalone_mode=True)
    except KeyboardInterrupt:
        console_err.print("[red]error:[/red] interrupted", highlight=False)
        sys.exit(130)
