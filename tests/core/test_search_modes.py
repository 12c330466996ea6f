"""InMemoryRetriever's search modes: hybrid (the default fusion), lexical and vector."""

from __future__ import annotations

import numpy as np
import pytest

from contextstore.core.embedding import HashingEmbedder
from contextstore.core.passages import split_passages
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.errors import ValidationError
from contextstore.sample_data import load_corpus

QUERIES = [
    "How do I fail over the primary Postgres cluster?",
    "refund for an annual plan cancelled after three weeks",
    "who is the incident commander during a SEV1",
    "rotate TLS certificates",
]


def corpus_retriever(**options: object) -> InMemoryRetriever:
    retriever = InMemoryRetriever(**options)  # type: ignore[arg-type]
    retriever.add_documents(load_corpus())
    return retriever


def outcome(retriever: InMemoryRetriever, query: str, **options: object) -> list[tuple[str, float]]:
    found = retriever.retrieve(query, None, 5, **options)  # type: ignore[arg-type]
    return [(chunk.source, chunk.score) for chunk in found]


@pytest.mark.parametrize("query", QUERIES)
def test_lexical_mode_is_bm25_alone(query: str) -> None:
    plain = corpus_retriever()
    fused = corpus_retriever(embed_fn=HashingEmbedder())
    assert outcome(fused, query, mode="lexical") == outcome(plain, query)
    assert outcome(corpus_retriever(embed_fn=HashingEmbedder(), mode="lexical"), query) == (
        outcome(plain, query)
    )


@pytest.mark.parametrize("query", QUERIES)
def test_hybrid_mode_is_the_default_fusion(query: str) -> None:
    fused = corpus_retriever(embed_fn=HashingEmbedder())
    assert outcome(fused, query, mode="hybrid") == outcome(fused, query)
    # Without an embedder hybrid has nothing to fuse: it is BM25.
    assert outcome(corpus_retriever(), query, mode="hybrid") == outcome(corpus_retriever(), query)


@pytest.mark.parametrize("query", QUERIES)
def test_vector_mode_ranks_by_cosine(query: str) -> None:
    embedder = HashingEmbedder()
    retriever = corpus_retriever(embed_fn=embedder)
    found = retriever.retrieve(query, None, 5, mode="vector")
    every = retriever.retrieve(query, None, 10_000, mode="vector")
    unit = embedder(query)
    for chunk in every:
        assert chunk.score == pytest.approx(float(np.dot(embedder(chunk.text), unit)), abs=1e-5)
    assert [c.score for c in every] == sorted((c.score for c in every), reverse=True)
    assert [(c.source, c.score) for c in found] == [(c.source, c.score) for c in every[:5]]
    texts = [text for doc in load_corpus() for text in split_passages(doc["text"])]
    positive = [text for text in texts if float(np.dot(embedder(text), unit)) > 0.0]
    assert sorted(c.text for c in every) == sorted(positive)


def test_vector_mode_applies_filters_before_ranking() -> None:
    retriever = InMemoryRetriever(HashingEmbedder())
    retriever.add("promote the standby replica", "ops.md", {"team": "ops"})
    retriever.add("promote the standby replica now", "billing.md", {"team": "billing"})
    found = retriever.retrieve("promote standby", None, 5, {"team": "billing"}, mode="vector")
    assert [chunk.source for chunk in found] == ["billing.md"]


def test_a_passage_sharing_no_word_is_found_only_by_similarity() -> None:
    retriever = InMemoryRetriever(HashingEmbedder())
    retriever.add("replication of replicas", "near.md")  # shares 3-grams, not words
    retriever.add("invoices and refunds", "far.md")
    assert retriever.retrieve("replica", None, 5, mode="lexical") == []
    assert [c.source for c in retriever.retrieve("replica", None, 1, mode="vector")] == ["near.md"]
    assert [c.source for c in retriever.retrieve("replica", None, 1, mode="hybrid")] == ["near.md"]


def test_bad_modes_are_refused_naming_the_field() -> None:
    retriever = corpus_retriever(embed_fn=HashingEmbedder())
    with pytest.raises(ValidationError) as error:
        retriever.retrieve("q", None, 5, mode="semantic")  # type: ignore[arg-type]
    assert error.value.field == "mode"
    with pytest.raises(ValidationError) as error:
        InMemoryRetriever(mode="fuzzy")  # type: ignore[arg-type]
    assert error.value.field == "mode"
    with pytest.raises(ValidationError, match="needs an embed_fn"):
        InMemoryRetriever(mode="vector")
    with pytest.raises(ValidationError, match="needs an embed_fn"):
        corpus_retriever().retrieve("q", None, 5, mode="vector")


def test_vector_mode_with_a_failing_query_embedding_finds_nothing() -> None:
    calls: list[str] = []

    def flaky(text: str) -> np.ndarray:  # type: ignore[type-arg]
        calls.append(text)
        if text == "boom":
            raise RuntimeError("model crashed")
        return np.ones(4)

    retriever = InMemoryRetriever(flaky)
    retriever.add("some passage", "a.md")
    assert retriever.retrieve("boom", None, 5, mode="vector") == []
    assert [c.source for c in retriever.retrieve("passage", None, 5, mode="vector")] == ["a.md"]
