"""What a drawn metrics plot shows, read back from the matplotlib figure it saved.

``capture_figures`` records every figure ``Figure.savefig`` writes (the PNG is written as
well); ``panels`` reads each panel back: its title, axis labels, limits, bars and the values
of each labelled line, so tests assert what a reader of the plot sees, not only that a file
exists.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest


def capture_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Figures saved from now on (the list fills as ``savefig`` is called)."""
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


def _instant(value: Any) -> datetime:
    """A bar's or a point's x as an aware UTC datetime, to the second."""
    from matplotlib.dates import num2date

    moment = value if isinstance(value, datetime) else num2date(value, tz=UTC)
    whole = round(moment.timestamp())
    return datetime.fromtimestamp(whole, tz=UTC)


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)


def panels(figure: Any) -> list[dict[str, Any]]:
    """One dict per panel, top to bottom."""
    described = []
    for axes in figure.axes:
        legend = axes.get_legend()
        bars = [
            (_instant(bar.get_x() + bar.get_width() / 2), _number(bar.get_height()))
            for bar in axes.patches
        ]
        lines = {
            line.get_label(): [
                (_instant(x), _number(y))
                for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
            ]
            for line in axes.get_lines()
        }
        described.append(
            {
                "title": axes.get_title(loc="left"),
                "ylabel": axes.get_ylabel(),
                "xlabel": axes.get_xlabel(),
                "ylim": tuple(round(v, 6) for v in axes.get_ylim()),
                "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
                "bars": bars,
                "lines": lines,
                "notes": [text.get_text() for text in axes.texts],
            }
        )
    return described


def span(figure: Any) -> tuple[datetime, datetime]:
    """The time axis' range (all panels share it)."""
    low, high = figure.axes[-1].get_xlim()
    return _instant(low), _instant(high)


def hours(start: datetime, *offsets: float) -> list[datetime]:
    return [start + timedelta(hours=offset) for offset in offsets]
