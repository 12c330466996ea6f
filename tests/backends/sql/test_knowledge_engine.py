"""The engine on the SQL knowledge base: the default retriever, and never a stale cached context."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis

from contextstore import connect
from contextstore.backends.redis.cache import RedisContextCache
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import corpus_lines, sample_retriever
from contextstore.store.sync import Store
from tests.backends.redis import drop_namespace
from tests.leftovers import unique_name

QUERY = "How do we rotate the zebra keys?"


def store_for(database_url: str, namespace: str, **kwargs: Any) -> Store:
    return connect(database_url=database_url, redis_url="", namespace=namespace, **kwargs)


def sources(engine: ContextEngine) -> tuple[list[str], bool]:
    result = engine.run(QUERY)
    return [chunk.source for chunk in result.chunks_used], result.cache_hit


def test_store_engine_retrieves_from_the_knowledge_base(database_url: str) -> None:
    store = store_for(database_url, unique_name("k"))
    try:
        assert store.engine().retriever is store.knowledge
        other = InMemoryRetriever()
        assert store.engine(retriever=other).retriever is other
        store.knowledge.import_jsonl(corpus_lines())
        query = "What is the replica lag limit for a Postgres failover?"
        from_sql = store.engine().run(query)
        from_memory = ContextEngine(store.config, retriever=sample_retriever()).run(query)
        assert from_sql.chunks_used[0].source == "ops/runbook-postgres-replica-lag.md"
        assert from_sql.chunks_used == from_memory.chunks_used
        assert from_sql.context == from_memory.context
    finally:
        store.close()


def freshness_cycle(writer: Store, reader: ContextEngine) -> None:
    """A change by ``writer`` is seen by ``reader``'s next run, through its cache."""
    writer.knowledge.add("Rotate the zebra keys every 90 days with zebractl.", "ops/zebra.md")
    assert sources(reader) == (["ops/zebra.md"], False)
    assert sources(reader) == (["ops/zebra.md"], True)
    writer.knowledge.add("Also rotate zebra keys after every incident.", "ops/zebra-2.md")
    found, hit = sources(reader)
    assert sorted(found) == ["ops/zebra-2.md", "ops/zebra.md"] and hit is False
    writer.knowledge.delete("ops/zebra.md")
    writer.knowledge.delete("ops/zebra-2.md")
    assert sources(reader) == ([], False)
    assert sources(reader) == ([], True)


def test_a_knowledge_change_invalidates_the_memory_cache(database_url: str) -> None:
    namespace = unique_name("k")
    writer, reader = store_for(database_url, namespace), store_for(database_url, namespace)
    try:
        assert sources(reader.engine()) == ([], False)
        freshness_cycle(writer, reader.engine())
    finally:
        writer.close()
        reader.close()


def test_a_knowledge_change_invalidates_a_shared_redis_cache(database_url: str) -> None:
    namespace = unique_name("k")
    server = fakeredis.FakeServer()
    writer, reader = store_for(database_url, namespace), store_for(database_url, namespace)
    try:
        cache = RedisContextCache(fakeredis.FakeStrictRedis(server=server), namespace=namespace)
        freshness_cycle(writer, reader.engine(cache=cache))
    finally:
        writer.close()
        reader.close()


def test_an_entry_without_a_generation_is_a_miss(database_url: str) -> None:
    """A context composed by a retriever without generations never serves a knowledge run."""
    store = store_for(database_url, unique_name("k"))
    try:
        cache = store.cache
        memory = InMemoryRetriever()
        memory.add("Rotate the zebra keys from memory.", "memory.md")
        assert sources(store.engine(retriever=memory, cache=cache)) == (["memory.md"], False)
        assert sources(store.engine(retriever=memory, cache=cache)) == (["memory.md"], True)
        assert sources(store.engine(cache=cache)) == ([], False)
    finally:
        store.close()


@pytest.mark.redis
def test_a_knowledge_change_invalidates_real_redis(database_url: str, redis_url: str) -> None:
    namespace = unique_name("k")
    writer = connect(database_url=database_url, redis_url=redis_url, namespace=namespace)
    reader = connect(database_url=database_url, redis_url=redis_url, namespace=namespace)
    try:
        freshness_cycle(writer, reader.engine())
    finally:
        writer.close()
        reader.close()
        client = redis.Redis.from_url(redis_url)
        drop_namespace(client, namespace)  # entries, their statistics and the windows
        client.close()


def test_an_async_engine_retrieves_from_sql_and_never_serves_an_older_corpus(
    database_url: str,
) -> None:
    """``AsyncStore``'s engine reads the same knowledge base (``AsyncKnowledgeBase``) and
    applies the same generation rule: a sync writer's change is seen on its next run."""
    import asyncio

    from contextstore import connect_async
    from contextstore.backends.sql.aio import AsyncKnowledgeBase
    from tests.aio import Blocking

    namespace = unique_name("k")
    writer = store_for(database_url, namespace)
    with asyncio.Runner() as runner:
        store = connect_async(database_url, "", namespace)
        try:
            engine = store.engine()
            assert isinstance(engine.retriever, AsyncKnowledgeBase)
            reader: Any = Blocking(engine, runner)
            assert sources(reader) == ([], False)
            freshness_cycle(writer, reader)
            found = runner.run(store.knowledge.search("zebra keys"))
            assert found == writer.knowledge.search("zebra keys") == []
        finally:
            runner.run(store.aclose())
            writer.close()
