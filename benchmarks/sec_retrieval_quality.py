"""Retrieval quality and exact top-k speed, in memory, beside ``bm25s`` in the same run.

Quality, on two known-answer collections of real prose, each query with one relevant
document: ``docstrings`` (``docstring_collection``: API reference, a docstring's summary as the
query) and ``packages`` (``package_collection``: installed packages' descriptions, the synopsis
as the query). Every configuration indexes the same passages (``split_passages``) and is scored
at the document level (a document's score is its best passage's): nDCG@10 and recall@100.

* ``simple`` and ``english``: ``InMemoryRetriever`` lexical search with each analyzer, and
  ``english`` once more without its joined query words (``Unjoined``);
* ``vector (WordLlama)``: cosine of ``WordLlamaEmbedder`` vectors alone;
* ``hybrid (english + WordLlama)``: BM25 (``english``) fused with WordLlama cosine;
* ``bm25s``: the reference BM25 library with the same Snowball stemmer, the same stop words
  and the same k1 and b. It counts a word repeated in the query once per occurrence, as
  ``english`` does; a second row counts each distinct word once.

Both metrics are tie-aware (McSherry and Najork, ECIR 2008): documents with equal scores
share the places they occupy, and the relevant one earns the mean of those places' gains, so
neither the reference's float32 rounding nor our tie-break by source name moves a figure.
Collections hold near-identical documents (two docstrings of ``strftime``/``strptime`` share
their text), and a fixed tie order would credit or cost each of them whole.

The demo's questions over the demo's knowledge base (``demo_search``): search latency as the
demo's agents meet it, and what each configuration answers to the README's question.

Speed: lexical search with exact dynamic pruning against scoring every match (the same
index, the same answers), on docstrings of several installed packages.

``python -m benchmarks.sec_retrieval_quality [--quick] [--json docs/benchmarks/retrieval.json]
[--docs docs/benchmarks-retrieval.md]`` prints the tables, writes the figures to the JSON and
renders the page's tables from it (``--render-only`` renders from the JSON without measuring).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bm25s
import Stemmer

from benchmarks.context import Bench
from benchmarks.demo_search import demo_search, demo_table
from benchmarks.docstring_collection import Entry, collection, prose_passages
from benchmarks.package_collection import package_collection
from benchmarks.report import Row, at_least
from contextstore.backends.embedders import WordLlamaEmbedder
from contextstore.core.analyzers import (
    ENGLISH_STOP_WORDS,
    MAX_QUERY_TERMS,
    Analyzer,
    EnglishAnalyzer,
)
from contextstore.core.passage_index import ranked_chunks
from contextstore.core.passages import split_passages
from contextstore.core.ranking import top_order
from contextstore.core.retrieval import InMemoryRetriever, SearchMode
from contextstore.core.topk import top_candidates

SECTION = "Retrieval quality"
SPEED_PACKAGES = (
    "numpy", "sqlalchemy", "matplotlib", "hypothesis", "pydantic", "rich", "redis", "alembic",
    "jinja2", "email", "asyncio", "logging", "http", "xml", "unittest", "multiprocessing",
)  # fmt: skip
DEPTH = 100  # documents scored per query (recall@100)
ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "benchmarks" / "retrieval.json"
PAGE = ROOT / "docs" / "benchmarks-retrieval.md"
REFERENCE = "bm25s (Snowball, same stop words)"
UNJOINED = "english, no joined query words"
HYBRID = "hybrid (english + WordLlama)"

# (source, score) per document, best first; a document's score is its best passage's.
Search = Callable[[str], list[tuple[str, float]]]
COLLECTIONS: tuple[tuple[str, str, Callable[[], list[Entry]]], ...] = (
    ("docstrings", "Python standard library and numpy docstrings", collection),
    ("packages", "descriptions of the installed Debian packages", package_collection),
)


def tie_aware(ranked: Sequence[tuple[str, float]], relevant: str) -> tuple[float, float]:
    """nDCG@10 and recall@100 of one query whose one relevant document is ``relevant``.

    The documents scoring what ``relevant`` scores share their places: with ``above`` documents
    ahead and ``tied`` at its score (itself included), it is at each of places ``above + 1`` to
    ``above + tied`` with equal chance, and earns the mean gain. The ideal DCG is 1.
    """
    score = next((s for source, s in ranked if source == relevant), None)
    if score is None:
        return 0.0, 0.0
    above = sum(1 for _, s in ranked if s > score)
    tied = sum(1 for _, s in ranked if s == score)
    places = range(above + 1, above + tied + 1)
    ndcg = sum(1.0 / math.log2(place + 1) for place in places if place <= 10) / tied
    recall = sum(1 for place in places if place <= DEPTH) / tied
    return ndcg, recall


def evaluate(entries: Sequence[Entry], search: Search) -> dict[str, float]:
    ndcg = recall = 0.0
    latencies = []
    for entry in entries:
        started = time.perf_counter()
        ranked = search(entry.summary)
        latencies.append(time.perf_counter() - started)
        gained, found = tie_aware(ranked, entry.source)
        ndcg += gained
        recall += found
    return {
        "ndcg@10": ndcg / len(entries),
        "recall@100": recall / len(entries),
        "p50_ms": statistics.median(latencies) * 1000,
    }


def best_per_source(pairs: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Passages (best first) to documents: each source at its first, best, score."""
    best: dict[str, float] = {}
    for source, score in pairs:
        best.setdefault(source, score)
    return list(best.items())


class Unjoined(EnglishAnalyzer):
    """``english`` without its joined query words: the same terms as ``bm25s`` counts."""

    def weighted_query_terms(self, query: str) -> tuple[tuple[str, int], ...]:
        return tuple(itertools.islice(Counter(self.terms(query)).items(), MAX_QUERY_TERMS))


def ours(
    entries: Sequence[Entry], analyzer: str | Analyzer, mode: SearchMode, embedder: object
) -> Search:
    retriever = InMemoryRetriever(
        embedder if mode != "lexical" else None,  # type: ignore[arg-type]
        analyzer=analyzer,
        mode=mode,
    )
    retriever.add_documents((entry.body, entry.source) for entry in entries)
    retriever.retrieve("warm up", None, 1)  # builds the index (and embeds) outside the clock

    def search(query: str) -> list[tuple[str, float]]:
        # Passages to documents: three passages per document is ample for 100 documents.
        chunks = retriever.retrieve(query, None, 3 * DEPTH)
        return best_per_source([(chunk.source, chunk.score) for chunk in chunks])

    return search


def reference(entries: Sequence[Entry], distinct_query_words: bool) -> Search:
    passages = [(text, e.source) for e in entries for text in split_passages(e.body)]
    stemmer = Stemmer.Stemmer("english")
    stop_words = sorted(ENGLISH_STOP_WORDS)
    tokens = bm25s.tokenize(
        [text for text, _ in passages], stopwords=stop_words, stemmer=stemmer, show_progress=False
    )
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(tokens, show_progress=False)

    def search(query: str) -> list[tuple[str, float]]:
        words = bm25s.tokenize(
            [query], stopwords=stop_words, stemmer=stemmer, show_progress=False, return_ids=False
        )[0]
        if distinct_query_words:
            words = list(dict.fromkeys(words))
        if not words:
            return []
        found, scores = model.retrieve([words], k=3 * DEPTH, show_progress=False)
        return best_per_source(
            [
                (passages[int(i)][1], float(s))
                for i, s in zip(found[0], scores[0], strict=True)
                if s > 0
            ]
        )

    return search


def configurations(
    entries: Sequence[Entry], embedder: object
) -> list[tuple[str, Callable[[], Search]]]:
    return [
        ("simple", lambda: ours(entries, "simple", "lexical", None)),
        ("english", lambda: ours(entries, "english", "lexical", None)),
        (UNJOINED, lambda: ours(entries, Unjoined(), "lexical", None)),
        ("vector (WordLlama)", lambda: ours(entries, "english", "vector", embedder)),
        (HYBRID, lambda: ours(entries, "english", "hybrid", embedder)),
        (REFERENCE, lambda: reference(entries, False)),
        ("bm25s, distinct query words", lambda: reference(entries, True)),
    ]


def quality(bench: Bench) -> tuple[list[Row], dict[str, Any]]:
    embedder = WordLlamaEmbedder()
    rows: list[Row] = []
    measured: dict[str, Any] = {}
    for key, description, build_collection in COLLECTIONS:
        bench.say(f"retrieval quality: building the {key} collection")
        entries = build_collection()
        if not entries:
            bench.notes.append(f"Retrieval quality: no {key} collection on this machine.")
            continue
        scores: dict[str, dict[str, float]] = {}
        for name, build in configurations(entries, embedder):
            bench.say(f"retrieval quality, {key}: {name}")
            scores[name] = evaluate(entries, build())
        measured[key] = {"description": description, "queries": len(entries), "scores": scores}
        bench.notes.append(
            f"Retrieval quality, {key}: {len(entries)} {description}, one query each."
        )
        baseline, english = scores[REFERENCE]["ndcg@10"], scores["english"]["ndcg@10"]
        hybrid = scores[HYBRID]["ndcg@10"]
        english_target, english_met = at_least(english / baseline, 1.0)
        hybrid_target, hybrid_met = at_least(hybrid / english, 1.0)
        rows += [
            Row(SECTION, f"nDCG@10 ({key}), english vs bm25s", f"{english:.4f}", "bm25s",
                f"{baseline:.4f}", english / baseline, english_target, english_met),
            Row(SECTION, f"nDCG@10 ({key}), hybrid vs english", f"{hybrid:.4f}", "english",
                f"{english:.4f}", hybrid / english, hybrid_target, hybrid_met),
        ]  # fmt: skip
    return rows, measured


def time_size(
    documents: Sequence[tuple[str, str]], copies: int, queries: Sequence[str]
) -> dict[str, float]:
    """p50 of lexical top-10 both ways over ``copies`` copies of ``documents``."""
    retriever = InMemoryRetriever(mode="lexical", analyzer="english")
    retriever.add_documents(
        (text, f"{source}#{copy}") for copy in range(copies) for text, source in documents
    )
    retriever.retrieve("warm up", None, 1)
    index = retriever._current_index()  # the retriever's own snapshot, ranked both ways
    count = len(index.passages)

    def tie(i: int) -> tuple[str, int]:
        return index.passages[i].source, index.passages[i].position

    def full(query: str) -> object:
        return retriever.retrieve(query, None, 10)

    def pruned(query: str) -> object:
        postings = index.postings(retriever.analyzer.query_terms(query))
        candidates, scores = top_candidates(postings, count, 10)
        order = top_order(scores, lambda i: tie(int(candidates[i])), 10)
        return ranked_chunks(index.passages, candidates[order], scores[order], 10)

    timings: dict[str, list[float]] = {"pruned": [], "full": []}
    for _ in range(3):
        for name, ranker in (("pruned", pruned), ("full", full)):
            for query in queries:
                started = time.perf_counter()
                ranker(query)
                timings[name].append(time.perf_counter() - started)
    return {
        "passages": float(count),
        "p50_pruned_ms": statistics.median(timings["pruned"]) * 1000,
        "p50_full_ms": statistics.median(timings["full"]) * 1000,
    }


def speed(bench: Bench) -> tuple[list[Row], list[dict[str, float]]]:
    bench.say("retrieval speed: reading docstrings")
    documents = prose_passages(SPEED_PACKAGES, 60_000)
    queries = [e.summary for e in collection()][: bench.pick(200, 500)]
    rows, measured = [], []
    # The prose once, then repeated under new sources: the same words at larger sizes.
    for copies in (1, 4) if bench.quick else (1, 4, 10):
        bench.say(f"retrieval speed: {copies}× the docstrings")
        values = time_size(documents, copies, queries)
        measured.append(values)
        pruned, full = values["p50_pruned_ms"], values["p50_full_ms"]
        rows.append(
            Row("Retrieval speed", f"lexical top-10 p50, {int(values['passages']):,} passages",
                f"{pruned:.3f} ms", "InMemoryRetriever (every match)", f"{full:.3f} ms",
                pruned / full, "", None, values=values)
        )  # fmt: skip
    return rows, measured


def run(bench: Bench) -> list[Row]:
    quality_rows, _ = quality(bench)
    speed_rows, _ = speed(bench)
    return quality_rows + speed_rows


def quality_table(collection_figures: dict[str, Any]) -> str:
    lines = [
        "| configuration | nDCG@10 | recall@100 | p50 per query |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, scores in collection_figures["scores"].items():
        lines.append(
            f"| {name} | {scores['ndcg@10']:.4f} | {scores['recall@100']:.4f} "
            f"| {scores['p50_ms']:.2f} ms |"
        )
    return "\n".join(lines) + "\n"


def speed_table(speed_values: Sequence[dict[str, float]]) -> str:
    lines = [
        "| lexical top-10 over | exact pruning (`topk`) p50 "
        "| every match (`InMemoryRetriever`) p50 | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for values in speed_values:
        lines.append(
            f"| {int(values['passages']):,} passages | {values['p50_pruned_ms']:.3f} ms "
            f"| {values['p50_full_ms']:.3f} ms "
            f"| {values['p50_pruned_ms'] / values['p50_full_ms']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def tables(figures: dict[str, Any]) -> dict[str, str]:
    """Each generated block of the page by name: one per collection, and ``speed``."""
    blocks = {key: quality_table(value) for key, value in figures["quality"].items()}
    blocks["demo"] = demo_table(figures["demo"])
    blocks["speed"] = speed_table(figures["speed"])
    return blocks


def render_page(page: str, figures: dict[str, Any]) -> str:
    """``page`` with every ``<!-- retrieval: NAME -->`` block rewritten from ``figures``."""
    for name, table in tables(figures).items():
        start, end = f"<!-- retrieval: {name} -->\n", "<!-- /retrieval -->"
        if start not in page:
            raise ValueError(f"the page has no block for {name!r}")
        head, rest = page.split(start, 1)
        page = head + start + table + end + rest.split(end, 1)[1]
    return page


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sec_retrieval_quality")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--docs", type=Path, help="render this page's tables from the figures")
    parser.add_argument(
        "--render-only", action="store_true", help="read the figures from --json, measure nothing"
    )
    args = parser.parse_args()
    if args.render_only:
        figures = json.loads((args.json or FIGURES).read_text(encoding="utf-8"))
    else:
        bench = Bench(quick=args.quick, services=None, say=print)  # type: ignore[arg-type]
        _, measured = quality(bench)
        demo = demo_search(bench)
        _, speed_values = speed(bench)
        figures = {
            "meta": {
                "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "python": platform.python_version(),
                "quick": args.quick,
            },
            "notes": bench.notes,
            "quality": measured,
            "demo": demo,
            "speed": speed_values,
        }
        if args.json is not None:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    for table in tables(figures).values():
        print(table)
    if args.docs is not None:
        args.docs.write_text(
            render_page(args.docs.read_text(encoding="utf-8"), figures), encoding="utf-8"
        )


if __name__ == "__main__":
    main()
