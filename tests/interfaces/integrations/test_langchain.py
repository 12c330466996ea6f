"""What the standard suites do not check: filters, the shared knowledge base, async stores,
ids of passages, prefixes and refusals."""

from __future__ import annotations

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from contextstore import Scope, Store, ValidationError, connect_async
from contextstore.interfaces.integrations.langchain import (
    ContextStoreRetriever,
    ContextStoreVectorStore,
)
from tests.interfaces.integrations.conftest import BACKUP, FAILOVER


def test_retriever_returns_passages_with_their_source_and_score(store: Store) -> None:
    documents = ContextStoreRetriever(store=store).invoke("promoting the replica with least lag")
    assert [(d.id, d.page_content) for d in documents] == [
        ("runbooks/failover.md#0", FAILOVER),
        ("runbooks/backup.md#0", BACKUP),
    ]
    first = documents[0].metadata
    assert {key: first[key] for key in ("team", "tier", "source", "passage")} == {
        "team": "db",
        "tier": 1,
        "source": "runbooks/failover.md",
        "passage": 0,
    }
    assert first["score"] > documents[1].metadata["score"] > 0


def test_retriever_filters_from_the_constructor_or_the_call(store: Store) -> None:
    by_team = ContextStoreRetriever(store=store, filters={"team": "ops"})
    assert [d.id for d in by_team.invoke("replica")] == ["runbooks/backup.md#0"]
    retriever = ContextStoreRetriever(store=store)
    assert [d.id for d in retriever.invoke("replica", filters={"tier": [1, 3]})] == [
        "runbooks/failover.md#0"
    ]
    with pytest.raises(ValidationError) as refused:
        retriever.invoke("replica", filters={"": 1})
    assert refused.value.field == "filters"
    with pytest.raises(ValidationError) as refused:
        ContextStoreRetriever(store=store, top_k=0).invoke("replica")
    assert refused.value.field == "top_k"


@pytest.mark.asyncio
async def test_retriever_on_an_async_store(store: Store, url: str) -> None:
    async with connect_async(database_url=url, redis_url="") as async_store:
        retriever = ContextStoreRetriever(store=async_store, top_k=1)
        documents = await retriever.ainvoke("replica", filters={"team": "ops"})
        assert [d.id for d in documents] == ["runbooks/backup.md#0"]
        with pytest.raises(ValidationError) as refused:
            retriever.invoke("replica")
        assert refused.value.field == "store"
    sync = await ContextStoreRetriever(store=store, top_k=1).ainvoke("replica lag")
    assert [d.id for d in sync] == ["runbooks/failover.md#0"]


def test_vector_store_documents_feed_the_engine_and_keep_their_vector_hidden(
    store: Store,
) -> None:
    vectors = ContextStoreVectorStore(
        store=store, embedding=DeterministicFakeEmbedding(size=8), source_prefix="lc/"
    )
    ids = vectors.add_texts(
        ["Rotate the TLS certificates of the edge proxies every 60 days."],
        [{"team": "edge"}],
        ids=["tls"],
    )
    assert ids == ["tls"]
    stored = store.knowledge.get("lc/tls")
    assert stored.metadata["team"] == "edge"
    [found] = vectors.similarity_search("anything", k=5)
    assert (found.id, found.metadata) == ("tls", {"team": "edge"})
    # The knowledge base's own documents (no vector) are not this store's.
    result = store.engine().run("rotate TLS certificates", scope=Scope(tags=("edge",)))
    assert [chunk.source for chunk in result.chunks_used] == ["lc/tls"]


def test_vector_store_filters_and_scores(store: Store) -> None:
    embedding = DeterministicFakeEmbedding(size=8)
    vectors = ContextStoreVectorStore.from_texts(
        ["alpha", "beta", "gamma"],
        embedding,
        [{"n": 1}, {"n": 2}, {"n": 2.0, "flag": True}],
        ids=["a", "b", "c"],
        store=store,
    )
    pairs = vectors.similarity_search_with_score("beta", k=3)
    assert pairs[0][0].id == "b" and pairs[0][1] == pytest.approx(1.0)
    assert [pair[1] for pair in pairs] == sorted((pair[1] for pair in pairs), reverse=True)
    assert sorted(d.id or "" for d in vectors.similarity_search("beta", k=3, filter={"n": 2})) == [
        "b",
        "c",
    ]
    assert [d.id for d in vectors.similarity_search("x", k=3, filter={"flag": True})] == ["c"]
    # A bool matches only a bool: 1 is not True.
    assert vectors.similarity_search("x", k=3, filter={"n": True}) == []
    with pytest.raises(ValidationError) as refused:
        vectors.similarity_search("x", k=0)
    assert refused.value.field == "k"


def test_vector_store_refuses_a_bad_text_naming_it(store: Store) -> None:
    vectors = ContextStoreVectorStore(store=store, embedding=DeterministicFakeEmbedding(size=4))
    with pytest.raises(ValidationError) as refused:
        vectors.add_texts(["fine", "   "], ids=["1", "2"])
    assert refused.value.field == "texts[1].text"
    assert vectors.get_by_ids(["1", "2"]) == []  # nothing partly written
    with pytest.raises(ValidationError) as refused:
        ContextStoreVectorStore.from_texts(["x"], DeterministicFakeEmbedding(size=4))
    assert refused.value.field == "store"
