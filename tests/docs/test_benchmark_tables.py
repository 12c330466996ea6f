"""The benchmark tables of the docs are what ``benchmarks.docs`` renders from the committed
figures, so the numbers on the page and in the JSON agree by construction."""

from __future__ import annotations

import json

from benchmarks import docs
from benchmarks.report import markdown_table
from tests.docs.pages import read


def test_the_page_is_what_the_writer_renders_from_the_figures() -> None:
    page = read("benchmarks.md")
    rows, earlier = docs.load_rows(docs.FIGURES), docs.load_rows(docs.EARLIER)
    assert docs.render_page(page, rows, earlier) == page
    assert docs.main(["--check"]) == 0


def test_every_figure_is_on_the_page_once() -> None:
    page = read("benchmarks.md")
    rows = docs.load_rows(docs.FIGURES)
    shown = [s for block in docs.blocks(page) if block.kind == "figures" for s in block.sections]
    assert len(shown) == len(set(shown))
    assert set(shown) == {row.section for row in rows}
    assert docs.uncovered_sections(page, rows) == []
    assert sum(
        block.body.count("\n") - 2 for block in docs.blocks(page) if block.kind == "figures"
    ) == len(rows)


def test_every_earlier_figure_is_compared_with_this_run_s() -> None:
    rows, earlier = docs.load_rows(docs.FIGURES), docs.load_rows(docs.EARLIER)
    current = {(row.section, row.name) for row in rows}
    assert earlier and all((row.section, row.name) in current for row in earlier)
    page = read("benchmarks.md")
    compared = "".join(block.body for block in docs.blocks(page) if block.kind == "figures-earlier")
    for row in earlier:
        assert f"| {row.name} | {row.ours} |" in compared, row.name


def test_a_stale_table_is_rewritten_and_the_prose_kept() -> None:
    rows, earlier = docs.load_rows(docs.FIGURES), docs.load_rows(docs.EARLIER)
    section = rows[0].section
    stale = f"Prose.\n\n<!-- figures: {section} -->\n| old |\n<!-- /figures -->\n\nMore prose.\n"
    rendered = docs.render_page(stale, rows, earlier)
    table = markdown_table([row for row in rows if row.section == section])
    assert (
        rendered
        == f"Prose.\n\n<!-- figures: {section} -->\n{table}\n<!-- /figures -->\n\nMore prose.\n"
    )


def test_the_figures_are_a_results_file() -> None:
    data = json.loads(docs.FIGURES.read_text(encoding="utf-8"))
    assert set(data) == {"meta", "rows", "skipped", "notes"}
    assert all(isinstance(row["section"], str) and row["name"] for row in data["rows"])


def test_a_run_of_some_sections_replaces_only_their_rows() -> None:
    def row(section: str, name: str, ours: str) -> dict[str, object]:
        return {"section": section, "name": name, "ours": ours}

    current = {
        "meta": {"date": "first"},
        "rows": [row("A", "a1", "1 ms"), row("B", "b1", "2 ms"), row("B", "b2", "3 ms")],
        "skipped": [],
        "notes": ["first run"],
    }
    run = {"meta": {"date": "second"}, "rows": [row("B", "b1", "9 ms")], "skipped": [], "notes": []}
    merged = docs.merge_results(current, run)
    assert merged["rows"] == [row("A", "a1", "1 ms"), row("B", "b1", "9 ms")]
    assert merged["meta"] == {
        "date": "first",
        "updates": [{"sections": ["B"], "meta": {"date": "second"}}],
    }
    assert merged["notes"] == ["first run"]
