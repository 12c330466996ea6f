"""Result rows, and their Markdown and JSON renderings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    """One figure: ours, the baseline it is compared with, the ratio and the target.

    ``ratio`` is oriented so the target reads naturally: a throughput ratio is ours over the
    baseline's (higher is better), a time ratio ours over the baseline's (lower is better).
    ``met`` is ``None`` where there is no target (an informational figure).
    """

    section: str
    name: str
    ours: str
    baseline_name: str
    baseline: str
    ratio: float | None
    target: str = ""
    met: bool | None = None
    note: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # raw numbers for the JSON


@dataclass
class Results:
    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def rate(ops_per_second: float) -> str:
    if ops_per_second >= 1e6:
        return f"{ops_per_second / 1e6:.2f} M/s"
    if ops_per_second >= 1e4:
        return f"{ops_per_second / 1e3:.1f} k/s"
    if ops_per_second >= 100:
        return f"{ops_per_second:,.0f} /s"
    return f"{ops_per_second:.1f} /s"


def ms(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value * 1000:.0f} µs"


def ratio_text(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}×"
    return f"{value:.2f}×"


def at_least(value: float, target: float) -> tuple[str, bool]:
    return f"≥ {target:g}×", value >= target


def at_most(value: float, target: float) -> tuple[str, bool]:
    return f"≤ {target:g}×", value <= target


def _met(met: bool | None) -> str:
    return "" if met is None else ("✓" if met else "**✗**")


def markdown_table(rows: Sequence[Row]) -> str:
    lines = [
        "| Section | Measurement | contextstore | Baseline | Ratio | Target | Met |",
        "|---|---|---:|---|---:|---|:-:|",
    ]
    previous = None
    for row in rows:
        section = row.section if row.section != previous else ""
        previous = row.section
        name = row.name + (f" <br><sub>{row.note}</sub>" if row.note else "")
        baseline = f"{row.baseline_name}: {row.baseline}" if row.baseline else row.baseline_name
        lines.append(
            f"| {section} | {name} | {row.ours} | {baseline} | {ratio_text(row.ratio)} "
            f"| {row.target or '—'} | {_met(row.met)} |"
        )
    return "\n".join(lines)


def render_markdown(results: Results) -> str:
    meta = results.meta
    parts = [
        "# contextstore benchmarks",
        "",
        f"`python -m benchmarks{' --quick' if meta.get('quick') else ''}` · {meta['date']} · "
        f"{meta['machine']} · Python {meta['python']} · {meta['services']}",
        "",
        "Every figure is compared with a baseline measured in the same run, interleaved round "
        "by round; times are medians (p50) or 95th percentiles (p95) over many calls.",
        "",
        markdown_table(results.rows),
    ]
    if results.notes:
        parts += ["", *[f"- {note}" for note in results.notes]]
    if results.skipped:
        parts += ["", "Skipped:", *[f"- {line}" for line in results.skipped]]
    met = [row.met for row in results.rows if row.met is not None]
    parts += [
        "",
        f"Targets met: {sum(met)} of {len(met)}. Total time {meta.get('seconds', 0):.0f} s.",
        "",
    ]
    return "\n".join(parts)


def write(results: Results, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "latest.md"
    markdown.write_text(render_markdown(results), encoding="utf-8")
    data = {
        "meta": results.meta,
        "rows": [asdict(row) for row in results.rows],
        "skipped": results.skipped,
        "notes": results.notes,
    }
    path = out / "latest.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return markdown, path
