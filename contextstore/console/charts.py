"""Charts drawn on the server as inline SVG: no script, no build step, no image files.

Pure functions from numbers to SVG text. The SVG scales to its container (``viewBox``, width
100 %), so one drawing fits a laptop and a phone. Every text that came from data is escaped;
each chart carries a ``<title>`` and ``role="img"`` for screen readers, and the pages show
the same numbers in a table beside it.

Edge cases: no points draws the axes and "no runs"; ``None`` values (a bucket whose figure is
undefined) leave a gap in a line and no bar; all-zero values keep a y-axis of 0–1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

WIDTH: Final = 640
HEIGHT: Final = 220
LEFT: Final = 56
RIGHT: Final = 12
TOP: Final = 14
BOTTOM: Final = 34
PALETTE: Final = ("#2563eb", "#dc2626", "#059669", "#d97706")
MAX_X_LABELS: Final = 6


@dataclass(frozen=True)
class Series:
    """One named line (or set of bars): a value per x position, ``None`` where undefined."""

    name: str
    values: Sequence[float | None]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10ⁿ that is ≥ ``value`` (1 for values ≤ 0 or not finite).

    Always positive and finite, so it can divide.
    """
    if not math.isfinite(value) or value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        bound = step * magnitude
        if bound >= value * (1 - 1e-12) and 0 < bound < math.inf:
            return bound
    # Subnormal values (the power of ten underflows) and values near the largest float
    # (ten times it overflows) have no round bound: the value itself is the axis' top.
    return value


def _number(value: float) -> str:
    if math.isfinite(value) and abs(value) < 1e15 and value == int(value):
        return str(int(value))
    return f"{value:.3g}"


def _axes(title: str, top: float, unit: str, labels: Sequence[str]) -> list[str]:
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">',
        f"<title>{escape(title)}</title>",
    ]
    for i in range(5):
        y = TOP + plot_h * (1 - i / 4)
        tick = top * i / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{escape(_number(tick))}{escape(unit)}</text>"
        )
    count = len(labels)
    if count:
        step = max(1, math.ceil(count / MAX_X_LABELS))
        for index in range(0, count, step):
            x = LEFT + plot_w * (index + 0.5) / count
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 12}" text-anchor="middle" class="tick">'
                f"{escape(labels[index])}</text>"
            )
    else:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" '
            'class="empty">no runs</text>'
        )
    return parts


def _top(series: Sequence[Series], fixed: float | None) -> float:
    if fixed is not None:
        return fixed
    values = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    return nice_ceiling(max(values, default=0.0))


def _legend(series: Sequence[Series]) -> list[str]:
    parts = []
    x = LEFT
    for index, item in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        parts.append(
            f'<rect x="{x}" y="{HEIGHT - 9}" width="10" height="8" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{HEIGHT - 1}" class="legend">{escape(item.name)}</text>'
        )
        x += 24 + 7 * len(item.name)
    return parts


def _y(value: float, top: float) -> float:
    plot_h = HEIGHT - TOP - BOTTOM
    clipped = min(max(value, 0.0), top)
    return TOP + plot_h * (1 - clipped / top)


def bar_chart(title: str, labels: Sequence[str], series: Series, *, unit: str = "") -> str:
    """Vertical bars, one per label (``series.values`` as long as ``labels``)."""
    if len(series.values) != len(labels):
        raise ValueError("one value per label")
    top = _top([series], None)
    parts = _axes(title, top, unit, labels)
    plot_w = WIDTH - LEFT - RIGHT
    count = len(labels)
    for index, value in enumerate(series.values):
        if value is None or not math.isfinite(value):
            continue
        slot = plot_w / count
        y = _y(value, top)
        parts.append(
            f'<rect x="{LEFT + slot * index + slot * 0.15:.1f}" y="{y:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{HEIGHT - BOTTOM - y:.1f}" fill="{PALETTE[0]}">'
            f"<title>{escape(labels[index])}: {escape(_number(value))}{escape(unit)}</title>"
            "</rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def line_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    unit: str = "",
    top: float | None = None,
) -> str:
    """One polyline per series over the labels; ``top`` fixes the y-axis (e.g. 100 for %)."""
    for item in series:
        if len(item.values) != len(labels):
            raise ValueError("one value per label in every series")
    ceiling = _top(series, top)
    parts = _axes(title, ceiling, unit, labels)
    plot_w = WIDTH - LEFT - RIGHT
    count = len(labels)
    for index, item in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        run: list[str] = []
        points: list[list[str]] = [run]
        for position, value in enumerate(item.values):
            if value is None or not math.isfinite(value):
                run = []
                points.append(run)
                continue
            x = LEFT + plot_w * (position + 0.5) / count
            run.append(f"{x:.1f},{_y(value, ceiling):.1f}")
        for segment in points:
            if len(segment) == 1:
                cx, cy = segment[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            elif segment:
                parts.append(
                    f'<polyline points="{" ".join(segment)}" fill="none" stroke="{colour}" '
                    'stroke-width="2"/>'
                )
    parts.extend(_legend(series))
    parts.append("</svg>")
    return "".join(parts)
