"""What every command shares: consoles, one-line errors, JSON output, the root command.

Every command registered anywhere under the root ``CommandLine`` group inherits its
behaviour without doing anything: usage errors (a wrong type, a missing argument, an unknown
option or command) become one ``error:`` line on stderr with exit status 2, and flags are
listed in ``--help`` without a ``<bool>`` type.
"""

from __future__ import annotations

import enum
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption

from contextstore.core.jsonl import escape_json_text
from contextstore.errors import ContextStoreError, ValidationError
from contextstore.interfaces.cli.visible import VisibleControls, visible
from contextstore.interfaces.results import rfc3339

if TYPE_CHECKING:
    from contextstore.backends.sql.repository import ImportSummary

console = Console()
console_err = Console(stderr=True)
for _console in (console, console_err):
    _console.push_render_hook(VisibleControls())


def print_json(data: Any) -> None:
    """Machine-readable output for ``--json``: plain JSON on stdout, one document.

    Numbers stay numbers (a ``Decimal`` from PostgreSQL becomes an int or a float, never a
    string); datetimes are RFC 3339 in UTC with ``Z``, enums their value, paths their text.
    Strings are exact; control characters are JSON escapes, never raw (``escape_json_text``).
    """
    encoded = json.dumps(data, ensure_ascii=False, indent=2, default=_json_default)
    print(escape_json_text(encoded))


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def ratio(numerator: int, denominator: int) -> float | None:
    """``numerator / denominator`` as a number for JSON; ``None`` when nothing was counted."""
    return numerator / denominator if denominator else None


def table(
    title: str | None,
    columns: list[str],
    rows: list[list[Any]],
    *,
    flexible: str | Sequence[str] | None = None,
    identifiers: str | Sequence[str] | None = None,
    wrap: bool = False,
    compact: bool = False,
    balanced: bool = False,
) -> Table:
    """A Rich table that fits the terminal, numeric columns right-aligned, user text never
    read as markup.

    Cells stay on one line: a cell's own line breaks and tabs are shown as spaces, other
    control characters as ``\\xNN`` (``visible``), and text too wide for the terminal is cut
    with an ellipsis. ``identifiers`` names the columns never cut (an entity id, a source,
    a key id: what a reader copies into the next command); the others give way first.
    ``flexible`` names the column (or columns) that give way before the rest: their cells
    are cut, or wrapped when ``wrap`` is set (for prose such as a lesson's detail). Of
    several, the widest gives way first, and the last named only once the others are down
    to 12 characters (or, when ``balanced``, all of them alike, widest first); none below 8.
    When that is not enough, an identifier wraps onto more lines, whole, down to 16
    characters wide; then every other text column gives way, down to 8 characters, then all
    of them down to 4, and the identifiers wrap down to 8.
    Numbers are never cut: only a table of more numeric columns than the terminal holds
    wraps them. ``compact`` drops the vertical borders, for wide reports that should still
    fit 80 columns.
    """
    result = Table(
        title=None if title is None else visible(title),
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        pad_edge=not compact,
        collapse_padding=compact,
    )
    names = [flexible] if isinstance(flexible, str) else list(flexible or ())
    kept_names = [identifiers] if isinstance(identifiers, str) else list(identifiers or ())
    kept = {columns.index(name) for name in kept_names if name in columns}
    give = [columns.index(name) for name in names if name in columns and name not in kept_names]
    wrapping = {index for index in give if wrap}
    cells = [
        [
            visible(format_cell(cell) if index in wrapping else " ".join(format_cell(cell).split()))
            for index, cell in enumerate(row)
        ]
        for row in rows
    ]
    widths = [
        max([len(name), *(len(row[index]) for row in cells)]) for index, name in enumerate(columns)
    ]
    numeric = [
        bool(rows)
        and all(
            isinstance(row[index], int | float) and not isinstance(row[index], bool) for row in rows
        )
        for index in range(len(columns))
    ]
    # Borders and padding take three characters a column plus one, or two without borders.
    room = console.width - (2 * len(columns) if compact else 3 * len(columns) + 1)
    excess = sum(widths) - room
    # With several flexible columns, all but the last first give way down to 12 characters,
    # so the last keeps its width as long as possible; then all to 8; then the identifiers
    # wrap down to 16; then every other text column goes to 8, all of them to 4, and the
    # identifiers wrap down to 8.
    others = [
        index
        for index in range(len(columns))
        if index not in give and index not in kept and not numeric[index]
    ]
    stages = [(give[:-1], 12), (give, 8)] if len(give) > 1 and not balanced else [(give, 8)]
    stages += [(sorted(kept), 16), (others, 8), (give + others, 4), (sorted(kept), 8)]
    for columns_giving, floor in stages:
        excess = _give_way(widths, columns_giving, floor, excess)
    fits = sum(widths) <= room
    for index, name in enumerate(columns):
        justify: Literal["left", "right"] = "right" if numeric[index] else "left"
        if not fits:
            result.add_column(name, justify=justify, overflow="fold")
            continue
        # An identifier narrower than its text wraps whole, onto as many lines as it needs.
        too_narrow = widths[index] < max([len(name), *(len(row[index]) for row in cells)])
        wraps = index in wrapping or (index in kept and too_narrow)
        result.add_column(
            name,
            justify=justify,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=widths[index],
            max_width=widths[index],
        )
    for row in cells:
        # Text, not markup: cells hold user data such as "[Source: …]" or "tag:[x]".
        result.add_row(*(Text(cell) for cell in row))
    return result


def _give_way(widths: list[int], giving: list[int], floor: int, excess: int) -> int:
    """Narrow the columns ``giving`` (widest first, none below ``floor``) by up to
    ``excess`` characters in all; returns what is still in excess."""
    while excess > 0:
        shrinkable = [index for index in giving if widths[index] > floor]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda index: widths[index])
        runner_up = max((widths[i] for i in shrinkable if i != widest), default=floor)
        # Cut the widest down to the next one (or the floor), one character when level.
        step = min(excess, max(1, widths[widest] - max(floor, runner_up)))
        widths[widest] -= step
        excess -= step
    return excess


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 lesson``, ``2 lessons``, ``1,200 runs``: the count and the word that agrees."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def progress_bar(on: Console) -> Progress:
    """A transient bar on ``on``: description, bar, ``done/total`` and the time taken."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=on,
        transient=True,
    )


def print_record(title: str, record: dict[str, Any], as_json: bool) -> None:
    """One record: a JSON object with ``--json``, else a one-row table, a column a key."""
    if as_json:
        print_json(record)
        return
    console.print(table(title, list(record), [list(record.values())]))


def print_import_summary(summary: ImportSummary, title: str, as_json: bool) -> None:
    """An import's counts (``added``, ``updated``, ``unchanged``), as ``print_record``."""
    record = {"added": summary.added, "updated": summary.updated, "unchanged": summary.unchanged}
    print_record(title, record, as_json)


def percent(fraction: float | None) -> str:
    """``0.125`` → ``"12.5%"``; ``None`` (nothing measured) → ``"—"``."""
    return "—" if fraction is None else f"{100.0 * fraction:.1f}%"


def format_cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# Exit statuses: 2 when the caller's input is wrong (a value the CLI cannot parse, as click
# does for unknown options, or one the library refused: a ValidationError naming the field);
# 1 when a service failed or the request cannot be done as things stand (no such lesson).
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def error_line(message: str) -> None:
    """Print ``error: message`` as exactly one line on stderr."""
    # Drivers put newlines in their messages; soft_wrap stops Rich from breaking the line at
    # the terminal width; escape keeps brackets ("contextstore[plot]") from reading as markup.
    line = escape(" ".join(message.split()))
    console_err.print(f"[red]error:[/red] {line}", highlight=False, soft_wrap=True)


def fail(message: str, *, code: int = EXIT_FAILURE) -> NoReturn:
    """Print ``error: message`` as exactly one line on stderr and exit with ``code``."""
    error_line(message)
    raise typer.Exit(code)


def exit_status(error: BaseException) -> int:
    """2 for the caller's input refused (``ValidationError``), else 1."""
    return EXIT_USAGE if isinstance(error, ValidationError) else EXIT_FAILURE


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn any refusal or service failure inside the block into one line; exit status 2
    for a value refused, 1 for the rest (``exit_status``)."""
    try:
        yield
    except (ContextStoreError, OSError, UnicodeDecodeError) as exc:
        fail(str(exc), code=exit_status(exc))


class CommandLine(TyperGroup):
    """The root command group; what it does applies to every command beneath it.

    - A refusal or service failure a command did not handle itself is one ``error:`` line,
      exit status 2 for a value refused (``ValidationError``), else 1; Ctrl-C is
      ``error: interrupted``, exit 130.
    - A usage error is one line, ``error: <what> (see '<command> --help')``, exit status 2,
      instead of the usage banner and an error panel. ``typer.Abort`` (a refused
      confirmation) is ``error: aborted``, exit 1. A group run without a subcommand still
      prints its help (exit 2).
    - Flags (``--json``, ``--dry-run``, ``--help`` …) show no ``<bool>`` type in the help.
    - Before any command runs (its ``--help`` aside), the settings (``contextstore.toml`` and
      the environment) are read and checked: a bad key or value is one line naming it and
      the file, exit 2.
    """

    def invoke(self, ctx: Any) -> Any:
        from contextstore.config.sources import load_settings

        # A command's --help still shows, whatever the file holds.
        if not {"--help", "-h"} & {*ctx.args, *getattr(ctx, "_protected_args", ())}:
            load_settings(os.environ)
        return super().invoke(ctx)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        _plain_flags(self)
        try:
            result = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except typer.Abort:
            error_line("aborted")
            result = EXIT_FAILURE
        except KeyboardInterrupt:
            error_line("interrupted")
            result = EXIT_INTERRUPTED
        except (ContextStoreError, OSError, UnicodeDecodeError) as exc:
            # The backstop for a command that let a refusal through: still one line.
            error_line(str(exc))
            result = exit_status(exc)
        except typer.TyperException as exc:  # click's UsageError family, vendored by typer
            result = _report_usage_error(exc)
        # Outside standalone mode click returns a typer.Exit's code as the result; commands
        # themselves return None.
        code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        if standalone_mode:
            sys.exit(code)
        return result


def _report_usage_error(exc: typer.TyperException) -> int:
    code = int(getattr(exc, "exit_code", EXIT_USAGE))
    context = getattr(exc, "ctx", None)
    # Matched by name, as typer itself does: the class lives in typer's private click copy.
    if type(exc).__name__ == "NoArgsIsHelpError":
        console.print(exc.format_message(), highlight=False, markup=False)
        return code
    message = exc.format_message()
    if context is not None and code == EXIT_USAGE:
        message = f"{message} (see '{context.command_path} --help')"
    error_line(message)
    return code


def _plain_flags(command: TyperCommand | TyperGroup) -> None:
    # An empty metavar is what the help shows in the type column: nothing for an on/off flag.
    params = list(command.params)
    help_option = command.get_help_option(typer.Context(command))
    if help_option is not None:
        params.append(help_option)
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for child in getattr(command, "commands", {}).values():
        _plain_flags(child)
