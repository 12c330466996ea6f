"""What every command shares: consoles, one-line errors, JSON output, opening the store."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
console_err = Console(stderr=True)


def print_json(data: Any) -> None:
    """Machine-readable output for ``--json``: plain JSON on stdout, one document."""
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    """A Rich table with numeric-looking columns right-aligned."""
    result = Table(title=title, title_justify="left", header_style="bold")
    for index, name in enumerate(columns):
        numeric = bool(rows) and all(
            isinstance(row[index], int | float) and not isinstance(row[index], bool) for row in rows
        )
        result.add_column(name, justify="right" if numeric else "left")
    for row in rows:
        result.add_row(*(format_cell(cell) for cell in row))
    return result


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
