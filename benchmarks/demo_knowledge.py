"""The demo's knowledge base, for the benchmarks that time whole runs.

The demo's natural-language queries (``data/demo_queries.json``) over the demo's documents
(``sample_data.demo_documents``: the fleet's 48 and Python's reference prose, about 1,200),
searched in the demo's configuration (``sample_data.DEMO_KNOWLEDGE``: ``english`` and
WordLlama, hybrid). A run's latency therefore includes a search as an agent meets it, not a
search of 48 short documents. Built once per process: the retriever is only read.
"""

from __future__ import annotations

import functools

from contextstore.backends.embedders import embedder_named
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.sample_data import DEMO_KNOWLEDGE, demo_documents, sample_retriever

__all__ = ["demo_retriever"]


@functools.cache
def demo_retriever() -> InMemoryRetriever:
    """The demo's documents in memory, indexed and embedded before any clock starts."""
    retriever = sample_retriever(
        embedder_named(DEMO_KNOWLEDGE.embedder),
        analyzer=DEMO_KNOWLEDGE.analyzer,
        documents=demo_documents(),
    )
    retriever.retrieve("warm up", None, 1)
    return retriever
