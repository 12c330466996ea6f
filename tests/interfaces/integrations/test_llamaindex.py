"""The LlamaIndex retriever inside a real query engine (with LlamaIndex's MockLLM), its
filters, and the lesson block inside a real ``Memory``."""

from __future__ import annotations

import pytest
from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import Memory
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from contextstore import Store, ValidationError, connect_async
from contextstore.interfaces.integrations.llamaindex import (
    ContextStoreLessonBlock,
    ContextStoreRetriever,
)
from tests.interfaces.integrations.conftest import BACKUP, FAILOVER


def test_retriever_returns_scored_nodes(store: Store) -> None:
    nodes = ContextStoreRetriever(store=store, top_k=2).retrieve("promoting replica least lag")
    assert [(n.node.node_id, n.node.get_content()) for n in nodes] == [
        ("runbooks/failover.md#0", FAILOVER),
        ("runbooks/backup.md#0", BACKUP),
    ]
    assert nodes[0].node.metadata == {
        "team": "db",
        "tier": 1,
        "passage": 0,
        "source": "runbooks/failover.md",
    }
    assert (nodes[0].score or 0) > (nodes[1].score or 0) > 0


def test_filters_as_a_mapping_or_as_metadata_filters(store: Store) -> None:
    by_mapping = ContextStoreRetriever(store=store, filters={"team": "ops"})
    assert [n.node.node_id for n in by_mapping.retrieve("replica")] == ["runbooks/backup.md#0"]
    filters = MetadataFilters(
        filters=[MetadataFilter(key="team", value=["db", "net"], operator=FilterOperator.IN)]
    )
    by_filters = ContextStoreRetriever(store=store, filters=filters)
    assert [n.node.node_id for n in by_filters.retrieve("replica")] == ["runbooks/failover.md#0"]
    for refused_filters in (
        MetadataFilters(
            filters=[MetadataFilter(key="team", value="db", operator=FilterOperator.GT)]
        ),
        MetadataFilters(
            filters=[MetadataFilter(key="team", value="db")], condition=FilterCondition.OR
        ),
    ):
        with pytest.raises(ValidationError) as refused:
            ContextStoreRetriever(store=store, filters=refused_filters)
        assert refused.value.field == "filters"


@pytest.mark.asyncio
async def test_async_retrieval_on_a_store_and_an_async_store(store: Store, url: str) -> None:
    nodes = await ContextStoreRetriever(store=store, top_k=1).aretrieve("replica lag")
    assert [n.node.node_id for n in nodes] == ["runbooks/failover.md#0"]
    async with connect_async(database_url=url, redis_url="") as async_store:
        retriever = ContextStoreRetriever(store=async_store, filters={"team": "ops"})
        assert [n.node.node_id for n in await retriever.aretrieve("replica")] == [
            "runbooks/backup.md#0"
        ]
        with pytest.raises(ValidationError) as refused:
            retriever.retrieve("replica")
        assert refused.value.field == "store"


def test_inside_a_retriever_query_engine(store: Store) -> None:
    retriever = ContextStoreRetriever(store=store, top_k=1)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("How do I fail over with the least replica lag?")
    assert [n.node.node_id for n in response.source_nodes] == ["runbooks/failover.md#0"]
    # MockLLM answers with the prompt it was given: the passage reached the model.
    assert FAILOVER in str(response)


@pytest.mark.asyncio
async def test_memory_gets_the_lesson_block_of_the_scope(store: Store) -> None:
    block = ContextStoreLessonBlock(store=store, tags=("ops",))
    memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])
    await memory.aput(ChatMessage(role="user", content="The primary is down."))
    messages = await memory.aget()
    system = messages[0]
    assert system.role == "system"
    assert (
        "<lessons>\n[Lessons — durable guidance distilled from prior work; matched 1, showing 1]\n"
        "- Check replica lag first. (ops.lag)\n</lessons>"
    ) in (system.content or "")
    assert messages[-1].content == "The primary is down."
    # Matched fresh on every read: a retired lesson is gone from the next turn.
    store.lessons.retire("ops.lag")
    assert await block.aget() == ""
