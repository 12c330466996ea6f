"""Write the benchmark tables of ``docs/benchmarks.md`` from a results JSON.

The page holds blocks the writer owns, each naming the sections it shows::

    <!-- figures: Memory cache; Memory footprint -->
    | Section | Measurement | ... |
    <!-- /figures -->

    <!-- figures-earlier: Web console, SQLite -->
    | Section | Measurement | earlier | ... |
    <!-- /figures -->

A ``figures`` block is ``report.markdown_table`` of those sections' rows of
``docs/benchmarks/figures.json`` (the format ``python -m benchmarks`` writes to
``results/latest.json``); a ``figures-earlier`` block sets the same rows beside those of
``docs/benchmarks/earlier.json``, an earlier run kept for comparison. Everything outside the
blocks is prose the writer leaves alone, so the numbers in the tables are the JSON's by
construction.

    python -m benchmarks.docs                          # rewrite the page from figures.json
    python -m benchmarks.docs --results results/latest.json   # publish a new run first
    python -m benchmarks.docs --update results/latest.json    # publish a run of some sections
    python -m benchmarks.docs --check                  # exit 1 if the page is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from benchmarks.report import Row, markdown_table

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "benchmarks" / "figures.json"
EARLIER = ROOT / "docs" / "benchmarks" / "earlier.json"

BLOCK = re.compile(
    r"^<!-- (?P<kind>figures|figures-earlier): (?P<sections>[^\n]*?) -->\n"
    r"(?P<body>.*?)^<!-- /figures -->$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    """One generated block of the page: its kind, the sections it shows, its current text."""

    kind: str
    sections: tuple[str, ...]
    body: str


def load_rows(path: Path) -> list[Row]:
    """The rows of a results JSON, in their order."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    names = {field.name for field in fields(Row)}
    return [
        Row(**{key: value for key, value in row.items() if key in names}) for row in data["rows"]
    ]


def merge_results(current: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """``current`` with the rows of every section ``run`` measured replaced by ``run``'s.

    A run of a few sections (``python -m benchmarks --sections …``) refreshes those tables and
    leaves the others' figures as they were; ``meta["updates"]`` keeps each partial run's meta
    and the sections it replaced, so the page's figures still say which run they come from.
    """
    measured = {row["section"] for row in run["rows"]}
    kept = [row for row in current["rows"] if row["section"] not in measured]
    update = {"sections": sorted(measured), "meta": run.get("meta", {})}
    meta = {**current.get("meta", {})}
    meta["updates"] = [*meta.get("updates", []), update]
    return {
        "meta": meta,
        "rows": [*kept, *run["rows"]],
        "skipped": [*current.get("skipped", []), *run.get("skipped", [])],
        "notes": [*current.get("notes", []), *run.get("notes", [])],
    }


def blocks(page: str) -> list[Block]:
    """The generated blocks of ``page``, in order."""
    return [
        Block(
            kind=match["kind"],
            sections=tuple(part.strip() for part in match["sections"].split(";")),
            body=match["body"],
        )
        for match in BLOCK.finditer(page)
    ]


def _select(rows: Sequence[Row], sections: Sequence[str]) -> list[Row]:
    known = {row.section for row in rows}
    missing = [section for section in sections if section not in known]
    if missing:
        raise ValueError(f"no rows for section(s): {', '.join(missing)}")
    return [row for row in rows if row.section in sections]


def earlier_table(rows: Sequence[Row], earlier: Sequence[Row]) -> str:
    """The rows that ``earlier`` also measured: the earlier figure beside this run's."""
    before = {(row.section, row.name): row for row in earlier}
    lines = [
        "| Section | Measurement | earlier | this run | baseline, this run |",
        "|---|---|---:|---:|---|",
    ]
    previous = None
    for row in rows:
        old = before.get((row.section, row.name))
        if old is None:
            continue
        section = row.section if row.section != previous else ""
        previous = row.section
        baseline = f"{row.baseline_name}: {row.baseline}" if row.baseline else row.baseline_name
        lines.append(f"| {section} | {row.name} | {old.ours} | {row.ours} | {baseline} |")
    return "\n".join(lines)


def render_block(block: Block, rows: Sequence[Row], earlier: Sequence[Row]) -> str:
    """What ``block``'s body must be for these figures (with its trailing newline)."""
    selected = _select(rows, block.sections)
    if block.kind == "figures":
        return markdown_table(selected) + "\n"
    return earlier_table(selected, earlier) + "\n"


def render_page(page: str, rows: Sequence[Row], earlier: Sequence[Row]) -> str:
    """``page`` with every generated block rewritten; the prose around them unchanged."""

    def replace(match: re.Match[str]) -> str:
        block = Block(
            kind=match["kind"],
            sections=tuple(part.strip() for part in match["sections"].split(";")),
            body=match["body"],
        )
        head = match.group(0)[: match.start("body") - match.start()]
        return f"{head}{render_block(block, rows, earlier)}<!-- /figures -->"

    return BLOCK.sub(replace, page)


def uncovered_sections(page: str, rows: Sequence[Row]) -> list[str]:
    """Sections of ``rows`` that no ``figures`` block of ``page`` shows."""
    shown = {
        section for block in blocks(page) if block.kind == "figures" for section in block.sections
    }
    return list(dict.fromkeys(row.section for row in rows if row.section not in shown))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.docs",
        description="Write the benchmark tables of docs/benchmarks.md from a results JSON.",
    )
    parser.add_argument(
        "--results", type=Path, help="a results JSON to publish first (copied to figures.json)"
    )
    parser.add_argument(
        "--update",
        type=Path,
        help="a results JSON of some sections: their rows replace those in figures.json",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    if args.results is not None:
        shutil.copyfile(args.results, FIGURES)
    if args.update is not None:
        current = json.loads(FIGURES.read_text(encoding="utf-8"))
        run = json.loads(args.update.read_text(encoding="utf-8"))
        merged = merge_results(current, run)
        FIGURES.write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n", "utf-8")
    rows, earlier = load_rows(FIGURES), load_rows(EARLIER)
    page = PAGE.read_text(encoding="utf-8")
    missing = uncovered_sections(page, rows)
    if missing:
        print(f"error: no table in {PAGE.name} shows: {', '.join(missing)}", file=sys.stderr)
        return 1
    rendered = render_page(page, rows, earlier)
    if args.check:
        if rendered != page:
            print(
                f"error: {PAGE.name} is out of date; run python -m benchmarks.docs", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
