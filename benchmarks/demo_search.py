"""Search as the demo's agents meet it: the demo's questions over the demo's knowledge base.

The 26 demo questions and the README's question, over ``sample_data.demo_documents`` (the
fleet's documents and Python's reference prose, about 1,200), in memory, three ways measured
in the same rounds, interleaved: ``simple`` and ``english`` lexical, and the demo's own
configuration (``DEMO_KNOWLEDGE``: ``english`` fused with WordLlama). Reported: p50 and p95 of
one top-8 search (what ``RetrievalConfig.top_k`` asks for), and which document each puts first
for "How do I fail over Postgres?".
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks.context import Bench
from benchmarks.timing import percentile
from contextstore.backends.embedders import embedder_named
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.sample_data import (
    DEMO_KNOWLEDGE,
    demo_documents,
    load_demo_queries,
    sample_retriever,
)

__all__ = ["README_QUESTION", "demo_search", "demo_table"]

README_QUESTION = "How do I fail over Postgres?"
TOP_K = 8
DEMO = f"{DEMO_KNOWLEDGE.analyzer} + {DEMO_KNOWLEDGE.embedder} (the demo's)"


def demo_search(bench: Bench) -> dict[str, Any]:
    bench.say("demo search: indexing and embedding the demo's documents")
    documents = demo_documents()
    retrievers: dict[str, InMemoryRetriever] = {
        "simple": sample_retriever(analyzer="simple", documents=documents),
        "english": sample_retriever(analyzer="english", documents=documents),
        DEMO: sample_retriever(
            embedder_named(DEMO_KNOWLEDGE.embedder),
            analyzer=DEMO_KNOWLEDGE.analyzer,
            documents=documents,
        ),
    }
    queries = [README_QUESTION, *dict.fromkeys(query.query for query in load_demo_queries())]
    for retriever in retrievers.values():
        for query in queries:  # warm: indexes built, query embeddings' code paths loaded
            retriever.retrieve(query, None, TOP_K)
    timings: dict[str, list[float]] = {name: [] for name in retrievers}
    for round_number in range(bench.pick(5, 15)):
        order = list(retrievers.items())
        for name, retriever in order if round_number % 2 else order[::-1]:
            for query in queries:
                started = time.perf_counter()
                retriever.retrieve(query, None, TOP_K)
                timings[name].append((time.perf_counter() - started) * 1000)
    return {
        "documents": len(documents),
        "passages": len(retrievers["simple"]),
        "questions": len(queries),
        "configurations": {
            name: {
                "p50_ms": statistics.median(timings[name]),
                "p95_ms": percentile(timings[name], 0.95),
                "first": retriever.retrieve(README_QUESTION, None, 1)[0].source,
            }
            for name, retriever in retrievers.items()
        },
    }


def demo_table(figures: dict[str, Any]) -> str:
    lines = [
        f"| configuration | top-{TOP_K} search p50 | p95 | first for “{README_QUESTION}” |",
        "| --- | ---: | ---: | --- |",
    ]
    for name, values in figures["configurations"].items():
        lines.append(
            f"| {name} | {values['p50_ms']:.2f} ms | {values['p95_ms']:.2f} ms "
            f"| `{values['first']}` |"
        )
    return "\n".join(lines) + "\n"
