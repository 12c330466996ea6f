"""The ``contextstore`` command line: thin — it parses, calls the library, prints.

Each command group lives in its own module and is registered here. Any ``ContextStoreError``
(and a few expected OS errors) becomes one red line on stderr and exit status 1, a usage
error or a value the library refused one such line and exit status 2 (see ``CommandLine``),
never a traceback.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from contextstore.interfaces.cli import (
    adaptive,
    cache,
    config,
    db,
    demo,
    docs,
    fleet,
    keys,
    lessons,
    mcp,
    metrics,
    serve,
)
from contextstore.interfaces.cli import help as wrapping_help
from contextstore.interfaces.cli.common import CommandLine

wrapping_help.install()

app = typer.Typer(
    name="contextstore",
    cls=CommandLine,
    help="One shared, durable context layer for fleets of LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=wrapping_help.CONTEXT_SETTINGS,
)


def _print_version(asked: bool) -> None:
    if asked:
        from contextstore import __version__

        print(f"contextstore {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print contextstore's version and exit",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """One shared, durable context layer for fleets of LLM agents."""


app.command("demo")(demo.demo)
app.command("run")(demo.run)
app.command("match")(demo.match_command)
app.command("fleet")(fleet.fleet)
app.add_typer(lessons.app, name="lessons")
app.add_typer(docs.app, name="docs")
app.add_typer(metrics.app, name="metrics")
app.add_typer(db.app, name="db")
app.add_typer(cache.app, name="cache")
app.add_typer(adaptive.app, name="adaptive")
app.command("serve")(serve.serve)
app.command("mcp")(mcp.mcp)
app.add_typer(keys.app, name="keys")
app.add_typer(config.app, name="config")


def main() -> None:
    """Console-script entry point."""
    # The library logs (guard warnings, Redis outages) through logging; on the command line
    # they are one line each on stderr, never mixed into stdout's tables or JSON.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # Errors of every kind become one line inside the root command (CommandLine.main).
    app(standalone_mode=True)
