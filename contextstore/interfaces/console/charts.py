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
HEIGHT: Final = 236
LEFT: Final = 56
RIGHT: Final = 12
TOP: Final = 14
BOTTOM: Final = 48
# Baselines below the plot: the x-axis labels, then (line charts) the legend on a row of its
# own, far enough apart that the two never touch.
X_LABEL_DROP: Final = 18
LEGEND_BASELINE: Final = HEIGHT - 6
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
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + X_LABEL_DROP}" text-anchor="middle" '
                'class="tick">'
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
            f'<rect x="{x}" y="{LEGEND_BASELINE - 8}" width="10" height="8" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{LEGEND_BASELINE}" class="legend">{escape(item.name)}</text>'
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


BAR_ROW: Final = 24
"""Height of one horizontal bar's row: more than a label's line, so labels never touch."""
BAR_LABEL_WIDTH: Final = 200
BAR_LABEL_CHARS: Final = 28
"""Longest label drawn in full; longer ones lose their middle to "…" (the full name on hover)."""
BAR_AXIS: Final = 22


def shorten(label: str, limit: int = BAR_LABEL_CHARS) -> str:
    """``label``, or, when longer than ``limit``, its start and its end around "…": names of
    one family (``payments.retry-01``, ``payments.retry-02``) differ at their ends."""
    if len(label) <= limit:
        return label
    head = limit // 3
    return label[:head] + "…" + label[len(label) - (limit - head - 1) :]


def hbar_chart(title: str, labels: Sequence[str], series: Series, *, unit: str = "") -> str:
    """Horizontal bars, one row per label: the chart grows a row per group, so labels of any
    number of groups stay apart and level (a label too long is cut, its ``<title>`` whole)."""
    if len(series.values) != len(labels):
        raise ValueError("one value per label")
    top = _top([series], None)
    rows = max(len(labels), 1)
    height = TOP + rows * BAR_ROW + BAR_AXIS
    left = BAR_LABEL_WIDTH
    plot_w = WIDTH - left - RIGHT - 8
    bottom = TOP + rows * BAR_ROW
    parts = [
        f'<svg class="chart" data-kind="bars" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'role="img" xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">',
        f"<title>{escape(title)}</title>",
    ]
    for i in range(5):
        x = left + plot_w * i / 4
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom}" class="grid"/>'
            f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle" class="tick">'
            f"{escape(_number(top * i / 4))}{escape(unit)}</text>"
        )
    if not labels:
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{TOP + BAR_ROW * 0.65:.1f}" '
            'text-anchor="middle" class="empty">no runs</text>'
        )
    for index, (label, value) in enumerate(zip(labels, series.values, strict=True)):
        y = TOP + index * BAR_ROW
        whole = f"{label}: {_number(value)}{unit}" if value is not None else label
        parts.append(
            f'<text x="{left - 6}" y="{y + BAR_ROW * 0.65:.1f}" text-anchor="end" '
            f'class="tick label"><title>{escape(whole)}</title>{escape(shorten(label))}</text>'
        )
        if value is None or not math.isfinite(value):
            continue
        width = plot_w * min(max(value, 0.0), top) / top
        parts.append(
            f'<rect x="{left}" y="{y + BAR_ROW * 0.18:.1f}" width="{width:.1f}" '
            f'height="{BAR_ROW * 0.64:.1f}" fill="{PALETTE[0]}"><title>{escape(whole)}</title>'
            "</rect>"
        )
    parts.append("</svg>")
    return "".join(parts)
