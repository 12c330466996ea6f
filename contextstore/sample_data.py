"""Sample data shipped with the package: a small knowledge base, lessons and demo queries.

The data describe the agent fleet of "Northwind Cloud", a fictional managed application
platform with three agent roles (support, ops on-call, coding) in three regions (eu-west,
us-east, me-central), in English and Arabic. The CLI demo, the benchmarks and the tests use
them; they are also a worked example of the file formats:

* ``data/corpus.jsonl``: one document per line,
  ``{"source": ..., "text": ..., "metadata": {"team": ..., "kind": ..., "lang": ...}}``.
* ``data/lessons.jsonl``: lessons in ``LessonRecord.to_json()`` form (``read_jsonl`` reads it).
* ``data/demo_queries.json``: a list of ``{"query", "tags", "entity_ids", "filters"}``.

Files are read with ``importlib.resources``, so they work from a wheel or a zip as well as
from a checkout. Every loader returns fresh objects; callers may mutate what they get.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from contextstore.lessons import LessonRecord, read_jsonl
from contextstore.matching import Scope
from contextstore.retrieval import EmbedFn, InMemoryRetriever

__all__ = [
    "DemoQuery",
    "corpus_lines",
    "load_corpus",
    "load_demo_queries",
    "load_lessons",
    "sample_retriever",
]


@dataclass(frozen=True)
class DemoQuery:
    """One demo request: the query, the asking agent's scope, optional retrieval filters."""

    query: str
    tags: tuple[str, ...] = ()
    entity_ids: tuple[str, ...] = ()
    filters: Mapping[str, Any] | None = None

    @property
    def scope(self) -> Scope:
        """The agent scope for the lesson matcher."""
        return Scope(entity_ids=self.entity_ids, tags=self.tags)


def _read_text(name: str) -> str:
    return resources.files("contextstore").joinpath("data", name).read_text(encoding="utf-8")


def load_corpus() -> list[dict[str, Any]]:
    """The sample documents, in file order: dicts with ``source``, ``text``, ``metadata``."""
    return [json.loads(line) for line in _read_text("corpus.jsonl").splitlines() if line.strip()]


def corpus_lines() -> list[str]:
    """The sample corpus as its JSON Lines, for ``store.knowledge.import_jsonl``."""
    return [line for line in _read_text("corpus.jsonl").splitlines() if line.strip()]


def load_lessons() -> list[LessonRecord]:
    """The sample lessons, validated (``ValidationError`` naming the line if the file is bad)."""
    return list(read_jsonl(_read_text("lessons.jsonl").splitlines()))


def load_demo_queries() -> list[DemoQuery]:
    """The demo queries, in file order (some repeat on purpose, to show cache hits)."""
    return [
        DemoQuery(
            query=item["query"],
            tags=tuple(item.get("tags") or ()),
            entity_ids=tuple(item.get("entity_ids") or ()),
            filters=item.get("filters"),
        )
        for item in json.loads(_read_text("demo_queries.json"))
    ]


def sample_retriever(embed_fn: EmbedFn | None = None) -> InMemoryRetriever:
    """An ``InMemoryRetriever`` loaded with the sample corpus.

    ``embed_fn=None`` gives BM25 ranking only; pass ``HashingEmbedder()`` (or any text →
    vector callable) for hybrid ranking.
    """
    retriever = InMemoryRetriever(embed_fn)
    retriever.add_documents(load_corpus())
    return retriever
