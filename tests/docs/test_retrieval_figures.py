"""The retrieval benchmark page shows what the benchmark wrote, and its prose agrees with it."""

from __future__ import annotations

import json
from typing import Any

from benchmarks import sec_retrieval_quality as quality
from benchmarks.docstring_collection import QUALITY_MODULES
from tests.docs.pages import read


def figures() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(quality.FIGURES.read_text(encoding="utf-8"))
    return data


def test_the_page_is_what_the_benchmark_renders_from_its_figures() -> None:
    page = read("benchmarks-retrieval.md")
    assert quality.render_page(page, figures()) == page
    for name in (*figures()["quality"], "speed"):
        assert f"<!-- retrieval: {name} -->" in page


def test_the_figures_hold_every_configuration_on_two_collections() -> None:
    data = figures()
    assert set(data["quality"]) == {"docstrings", "packages"}
    for collection in data["quality"].values():
        assert collection["queries"] >= 500
        assert list(collection["scores"]) == [name for name, _ in quality.configurations([], None)]
        for scores in collection["scores"].values():
            assert 0.0 < scores["ndcg@10"] <= scores["recall@100"] <= 1.0


def test_the_prose_states_what_the_figures_show() -> None:
    page = " ".join(read("benchmarks-retrieval.md").split())
    assert f"of {len(QUALITY_MODULES)} modules of Python's standard library and numpy" in page
    unjoined = []
    for collection in figures()["quality"].values():
        scores = {name: value["ndcg@10"] for name, value in collection["scores"].items()}
        # english above the reference, hybrid above english, on every collection.
        assert scores["english"] >= scores[quality.REFERENCE]
        assert scores[quality.HYBRID] >= scores["english"]
        assert max(scores, key=lambda name: scores[name]) == quality.HYBRID
        # Without the joined words english scores what bm25s scores, to the fourth digit.
        assert f"{scores[quality.UNJOINED]:.4f}" == f"{scores[quality.REFERENCE]:.4f}"
        unjoined.append(f"{scores[quality.UNJOINED]:.4f}")
    assert f"on both collections ({unjoined[0]} and {unjoined[1]})" in page


def test_the_retrieval_guide_quotes_this_run_s_figures() -> None:
    page = " ".join(read("retrieval.md").split())
    data = figures()["quality"]

    def ndcg(name: str) -> tuple[str, str]:
        return tuple(  # type: ignore[return-value]
            f"{data[key]['scores'][name]['ndcg@10']:.3f}" for key in ("docstrings", "packages")
        )

    english, simple = ndcg("english"), ndcg("simple")
    reference, hybrid = ndcg(quality.REFERENCE), ndcg(quality.HYBRID)
    assert f"({english[0]} against {simple[0]}, and {english[1]} against {simple[1]})" in page
    assert f"stemmer and stop words ({reference[0]} and {reference[1]})" in page
    assert f"best configuration on both ({hybrid[0]} and {hybrid[1]})" in page
    for collection in data.values():
        scores = collection["scores"]
        extra = scores[quality.HYBRID]["p50_ms"] - scores["english"]["p50_ms"]
        assert 0.0 < extra < 1.0  # "under a millisecond per query in memory"
    assert "under a millisecond per query in memory" in page


def test_the_demo_rows_show_the_readme_question_answered_by_the_runbook() -> None:
    demo = figures()["demo"]
    assert demo["documents"] >= 1_000 and demo["passages"] >= demo["documents"]
    firsts = {name: values["first"] for name, values in demo["configurations"].items()}
    runbook = "ops/runbook-postgres-failover.md"
    assert firsts["simple"].startswith("reference/python")  # "a page of Python's reference"
    assert firsts["english"] == runbook
    assert firsts["english + wordllama (the demo's)"] == runbook
    page = " ".join(read("benchmarks-retrieval.md").split())
    assert "`simple` answers the README's question with a page of Python's reference" in page
