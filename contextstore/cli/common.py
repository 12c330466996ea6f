"""What every command shares: consoles, one-line errors, JSON output, opening the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from contextstore.errors import ContextStoreError

console = Console()
console_err = Console(stderr=True)


def print_json(data: Any) -> None:
    """Machine-readable output for ``--json``: plain JSON on stdout, one document."""
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def table(
    title: str | None,
    columns: list[str],
    rows: list[list[Any]],
    *,
    flexible: str | None = None,
    wrap: bool = False,
    compact: bool = False,
) -> Table:
    """A Rich table with numeric columns right-aligned and user text never read as markup.

    Cells stay on one line while the table fits the terminal. ``flexible`` names the column
    that gives way first: its cells are cut with an ellipsis, or wrapped when ``wrap`` is set
    (for prose such as a lesson's detail). When even that is not enough, every column may
    wrap, so no column is ever squeezed out of sight. ``compact`` drops the vertical borders,
    for wide reports that should still fit 80 columns.
    """
    result = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        pad_edge=not compact,
        collapse_padding=compact,
    )
    cells = [[format_cell(cell) for cell in row] for row in rows]
    widths = [
        max([len(name), *(len(row[index]) for row in cells)]) for index, name in enumerate(columns)
    ]
    # Borders and padding take three characters a column plus one, or two without borders.
    room = console.width - (2 * len(columns) if compact else 3 * len(columns) + 1)
    if flexible in columns:
        index = columns.index(flexible)
        widths[index] = max(8, min(widths[index], room - (sum(widths) - widths[index])))
    fits = sum(widths) <= room
    for index, name in enumerate(columns):
        numeric = bool(rows) and all(
            isinstance(row[index], int | float) and not isinstance(row[index], bool) for row in rows
        )
        if not fits:
            result.add_column(name, justify="right" if numeric else "left", overflow="fold")
            continue
        wraps = wrap and name == flexible
        result.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=widths[index],
            max_width=widths[index],
        )
    for row in cells:
        # Text, not markup: cells hold user data such as "[Source: …]" or "tag:[x]".
        result.add_row(*(Text(cell) for cell in row))
    return result


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


# Exit statuses: 2 when the command line itself is wrong (a value the CLI cannot parse), as
# click does for unknown options; 1 when the library refused the request or a service failed.
EXIT_FAILURE = 1
EXIT_USAGE = 2


def fail(message: str, *, code: int = EXIT_FAILURE) -> NoReturn:
    """Print ``error: message`` as exactly one line on stderr and exit with ``code``."""
    # Drivers put newlines in their messages; soft_wrap stops Rich from breaking the line at
    # the terminal width; escape keeps brackets ("contextstore[plot]") from reading as markup.
    line = escape(" ".join(message.split()))
    console_err.print(f"[red]error:[/red] {line}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn any refusal or service failure inside the block into one line and exit status 1."""
    try:
        yield
    except (ContextStoreError, OSError, UnicodeDecodeError) as exc:
        fail(str(exc))
