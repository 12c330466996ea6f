"""The SVG charts: well-formed for any numbers and labels, text escaped, gaps where undefined."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.interfaces.console.charts import (
    BAR_ROW,
    LEGEND_BASELINE,
    Series,
    bar_chart,
    hbar_chart,
    line_chart,
    nice_ceiling,
    shorten,
)

SVG = "{http://www.w3.org/2000/svg}"
values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
labels = st.text(max_size=12).filter(lambda text: all(ch.isprintable() for ch in text))


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


@given(st.floats(min_value=1e-9, max_value=1e12))
def test_nice_ceiling_is_the_smallest_round_bound(value: float) -> None:
    top = nice_ceiling(value)
    assert top >= value * (1 - 1e-9)
    mantissa = top / 10 ** math.floor(math.log10(top))
    assert round(mantissa, 6) in (1.0, 2.0, 2.5, 5.0, 10.0)
    assert top < value * 10


@given(st.floats(min_value=0.0, exclude_min=True, allow_infinity=False))
def test_nice_ceiling_is_positive_and_finite(value: float) -> None:
    top = nice_ceiling(value)
    assert 0 < top < math.inf
    assert top >= value * (1 - 1e-9)


def test_nice_ceiling_of_nothing_is_one() -> None:
    assert [nice_ceiling(v) for v in (0.0, -3.0, math.nan, math.inf)] == [1.0] * 4
    assert [nice_ceiling(v) for v in (3.0, 40.0, 100.0, 0.21)] == [5.0, 50.0, 100.0, 0.25]
    assert nice_ceiling(5e-324) == 5e-324  # subnormal: no power of ten below it
    assert nice_ceiling(1.7e308) == 1.7e308  # no round bound above it fits a float


@given(st.lists(st.tuples(labels, values, values), max_size=60))
def test_any_input_draws_well_formed_svg(
    points: list[tuple[str, float | None, float | None]],
) -> None:
    names = [label for label, _, _ in points]
    first = Series("a<b>", [a for _, a, _ in points])
    second = Series("c&d", [b for _, _, b in points])
    for svg in (
        bar_chart("t<", names, first),
        hbar_chart("t>", names, first),
        line_chart("t&", names, [first, second]),
    ):
        root = parse(svg)
        assert root.tag == f"{SVG}svg"
        assert root.find(f"{SVG}title") is not None


def test_text_is_escaped_and_values_are_placed() -> None:
    svg = bar_chart("Runs <b>", ["<script>", "b"], Series("runs", [4.0, None]))
    assert "<script>" not in svg
    root = parse(svg)
    assert root.find(f"{SVG}title").text == "Runs <b>"  # type: ignore[union-attr]
    bars = root.findall(f"{SVG}rect")
    assert len(bars) == 1  # no bar for the undefined value
    assert bars[0].find(f"{SVG}title").text == "<script>: 4"  # type: ignore[union-attr]
    # 4 runs on a 0–5 axis: the bar covers 80 % of the plot's 174 px height.
    assert float(bars[0].get("height", "")) == pytest.approx(0.8 * 174, abs=0.1)


def test_lines_break_where_a_value_is_undefined() -> None:
    svg = line_chart("p", ["a", "b", "c", "d", "e"], [Series("p50", [1.0, 2.0, None, 4.0, None])])
    root = parse(svg)
    assert len(root.findall(f"{SVG}polyline")) == 1
    assert len(root.findall(f"{SVG}circle")) == 1  # the lone point after the gap


def test_no_points_says_no_runs() -> None:
    svg = line_chart("p", [], [Series("p50", [])])
    assert ">no runs</text>" in svg
    with pytest.raises(ValueError, match="one value per label"):
        bar_chart("x", ["a"], Series("runs", []))
    with pytest.raises(ValueError, match="one value per label"):
        line_chart("x", ["a"], [Series("runs", [1.0, 2.0])])


def test_group_labels_get_a_row_each_whatever_their_number_and_length() -> None:
    names = [f"payments.gateway.retry-policy-number-{i:02d}" for i in range(40)]
    root = parse(hbar_chart("Runs by lesson", names, Series("runs", [float(i) for i in range(40)])))
    labels = root.findall(f"{SVG}text[@class='tick label']")
    assert len(labels) == 40
    rows = [float(label.get("y", "")) for label in labels]
    assert all(later - earlier == pytest.approx(BAR_ROW) for earlier, later in pairwise(rows))
    # Cut in the middle, so the names stay told apart; whole on hover.
    assert labels[7].text is None
    assert labels[7][0].tail == "payments.…y-policy-number-07"
    assert labels[7].find(f"{SVG}title").text == f"{names[7]}: 7"  # type: ignore[union-attr]
    assert len({label[0].tail for label in labels}) == 40
    assert int(root.get("viewBox", "").split()[3]) >= 40 * BAR_ROW


def test_shorten_keeps_short_labels_and_both_ends_of_long_ones() -> None:
    assert shorten("agent-1") == "agent-1"
    assert shorten("x" * 28) == "x" * 28
    assert shorten("abcdefghij" * 3, 10) == "abc…efghij"


def test_the_legend_sits_on_its_own_row_below_the_time_labels() -> None:
    root = parse(line_chart("p", ["01 07:00", "01 08:00"], [Series("p50", [1.0, 2.0])]))
    times = [t for t in root.findall(f"{SVG}text") if t.text == "01 07:00"]
    legend = root.find(f"{SVG}text[@class='legend']")
    assert legend is not None and float(legend.get("y", "")) == LEGEND_BASELINE
    # Font 11 px: a baseline 20 px lower leaves a clear gap between the two rows.
    assert LEGEND_BASELINE - float(times[0].get("y", "")) >= 20
