"""``--format table|plain|csv|json`` for list-like commands: one place renders them all.

A table is for reading at a terminal: it fits the width (80 columns included), long text cut
with an ellipsis, an identifier never (it wraps, whole). The other formats are for programs
and keep every value whole: ``plain`` is one tab-separated line per row without a header
(for ``cut``/``grep``; tabs and newlines inside a value are written as ``\\t``/``\\n``, a
backslash as ``\\\\``, other control characters as ``\\xNN``), ``csv`` has a header row
(control characters but tabs and line breaks written as ``\\xNN``), ``json`` is one array
of objects (exact; JSON escapes them). No format ever sends a terminal a raw escape sequence.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer

from contextstore.core.jsonl import escape_json_text
from contextstore.interfaces.cli.common import EXIT_USAGE, console, fail, print_json, table
from contextstore.interfaces.cli.visible import visible


class OutputFormat(StrEnum):
    TABLE = "table"
    PLAIN = "plain"
    CSV = "csv"
    JSON = "json"


Format = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        help="Output as a table (default), plain tab-separated lines, CSV or JSON",
        case_sensitive=False,
        show_default=False,
    ),
]


def chosen_format(fmt: OutputFormat | None, as_json: bool) -> OutputFormat:
    """``--format``, with ``--json`` as its shorthand; both at once must agree."""
    if as_json and fmt not in (None, OutputFormat.JSON):
        fail(f"--json contradicts --format {fmt.value}", code=EXIT_USAGE)
    if as_json:
        return OutputFormat.JSON
    return fmt or OutputFormat.TABLE


def emit_rows(
    fmt: OutputFormat,
    title: str,
    records: Sequence[Mapping[str, Any]],
    *,
    columns: Sequence[str] | None = None,
    fields: Sequence[str] | None = None,
    flexible: str | Sequence[str] | None = None,
    identifiers: str | Sequence[str] | None = None,
    balanced: bool = False,
    empty: str,
) -> None:
    """Print ``records`` (one mapping per row, keys as column names) in ``fmt``.

    ``columns`` picks and orders the table's columns (default: every key), ``flexible`` and
    ``balanced`` say which give way first, ``identifiers`` which are never cut (see
    ``table``); the other formats always carry every key. ``fields`` names every key a
    record has, for the CSV header when there is no record (default: ``columns``).

    No record: a table is the one line ``empty``; JSON is ``[]``; CSV is its header row
    alone; plain is nothing at all (no line, as ``grep`` finding nothing).
    """
    if fmt is OutputFormat.JSON:
        print_json([dict(record) for record in records])
        return
    keys = list(records[0]) if records else list(fields or columns or ())
    if fmt is OutputFormat.CSV:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(keys)
        writer.writerows([[_flat(record[key]) for key in keys] for record in records])
        return
    if fmt is OutputFormat.PLAIN:
        for record in records:
            print("\t".join(_plain(record[key]) for key in keys))
        return
    if not records:
        console.print(empty, highlight=False, markup=False, soft_wrap=True)
        return
    shown = list(columns or keys)
    rows = [[_cell(record[key]) for key in shown] for record in records]
    rendered = table(
        title,
        shown,
        rows,
        flexible=flexible,
        identifiers=identifiers,
        compact=True,
        balanced=balanced,
    )
    console.print(rendered)


def _flat(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | tuple | dict):
        return escape_json_text(json.dumps(value, ensure_ascii=False))
    if isinstance(value, str):
        return visible(value, keep="\t\n\r")
    return value


def _plain(value: Any) -> str:
    # Backslashes first, so a written "\\x1b" never reads as one typed by hand.
    text = value if isinstance(value, str) else str(_flat(value))
    text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return visible(text, keep="")


def _cell(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        return " ".join(value.split())  # a table row stays one line
    return value
