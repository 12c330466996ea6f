"""connect(): which backends a URL (or the environment) wires, and that they are shared."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from contextstore import (
    BackendUnavailableError,
    ConfigurationError,
    LessonRecord,
    MemoryContextCache,
    MemoryWindows,
    RedisContextCache,
    RedisWindows,
    Scope,
    Store,
    connect,
)
from contextstore.backends.redis.client import client_from_url
from contextstore.config import ContextEngineConfig
from contextstore.core.retrieval import InMemoryRetriever
from tests.backends.redis import drop_namespace

QUERY = "How do I fail over Postgres when the replica lags?"


def retriever() -> InMemoryRetriever:
    docs = InMemoryRetriever()
    docs.add(
        "Postgres failover: confirm replica lag below five seconds before promoting a replica, "
        "then repoint the pooler.",
        "runbook/failover",
    )
    return docs


def test_connect_reads_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONTEXTSTORE_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    monkeypatch.setenv("CONTEXTSTORE_NAMESPACE", "tenant-a")
    monkeypatch.delenv("CONTEXTSTORE_REDIS_URL", raising=False)
    store = connect()
    assert store.config.database_url == f"sqlite:///{tmp_path / 'env.db'}"
    assert store.namespace == "tenant-a"
    assert store.uses_redis is False
    # Nothing is opened until a part is used.
    assert not (tmp_path / "env.db").exists()
    with store:
        assert isinstance(store.cache, MemoryContextCache)
        assert isinstance(store.windows, MemoryWindows)
        assert store.lessons.list() == []
    assert (tmp_path / "env.db").exists()


def test_arguments_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTEXTSTORE_NAMESPACE", "from-env")
    store = connect(database_url=f"sqlite:///{tmp_path / 'a.db'}", namespace="from-arg")
    assert store.namespace == "from-arg"


@pytest.mark.parametrize("namespace", ["", "has{brace}", "x" * 129])
def test_a_bad_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        connect(namespace=namespace)


def test_the_embedded_default_persists_lessons_and_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with connect(database_url=url) as store:
        store.lessons.add(
            LessonRecord("nw.l.ops.1", "Check lag first.", "critical", "active", ("tag:ops",))
        )
        result = store.engine(retriever=retriever()).run(QUERY, scope=Scope(tags=("ops",)))
        assert result.lessons.included_count == 1
    with connect(database_url=url) as again:
        assert again.metrics.count() == 1
        assert again.lessons.get("nw.l.ops.1").status == "active"


@contextmanager
def two_stores(redis_url: str, database_url: str, namespace: str) -> Iterator[tuple[Store, Store]]:
    """Two independent stores on one Redis and one database, cleaned up afterwards."""
    first = connect(database_url=database_url, redis_url=redis_url, namespace=namespace)
    second = connect(database_url=database_url, redis_url=redis_url, namespace=namespace)
    try:
        yield first, second
    finally:
        first.close()
        second.close()
        # Every key of the namespace, the cache's counters too (``cache.clear()`` keeps them).
        client = client_from_url(redis_url)
        drop_namespace(client, namespace)
        client.close()


def check_sharing(first: Store, second: Store) -> None:
    assert isinstance(first.cache, RedisContextCache)
    assert isinstance(first.windows, RedisWindows)
    assert first.cache.stats()["errors"] == 0
    scope = Scope(tags=("ops",))
    miss = first.engine(retriever=retriever()).run(QUERY, scope=scope)
    hit = second.engine(retriever=retriever()).run(QUERY, scope=scope)
    assert (miss.cache_hit, hit.cache_hit) == (False, True)
    assert hit.context == miss.context
    assert second.windows.summary().total_queries == 2
    assert first.cache.stats()["hits"] == 1 and first.cache.stats()["misses"] == 1


def test_two_stores_on_one_redis_share_cache_and_windows(
    redis_url: str, tmp_path: Path, namespace: str
) -> None:
    with two_stores(redis_url, f"sqlite:///{tmp_path / 's.db'}", namespace) as (first, second):
        check_sharing(first, second)


def test_connect_accepts_a_redis_cluster_url(
    redis_cluster_client: Any, tmp_path: Path, namespace: str
) -> None:
    port = redis_cluster_client.get_default_node().port
    url = f"redis+cluster://127.0.0.1:{port}"
    with two_stores(url, f"sqlite:///{tmp_path / 'c.db'}", namespace) as (first, second):
        check_sharing(first, second)


def test_engine_overrides_replace_store_parts(tmp_path: Path) -> None:
    with connect(database_url=f"sqlite:///{tmp_path / 'o.db'}") as store:
        cache = MemoryContextCache(max_size=2)
        engine = store.engine(retriever=retriever(), cache=cache, metrics=None)
        engine.run(QUERY)
        assert cache.stats()["size"] == 1
        assert store.metrics.count() == 0


def test_a_disabled_cache_is_not_wired(tmp_path: Path) -> None:
    config = ContextEngineConfig(database_url=f"sqlite:///{tmp_path / 'd.db'}")
    config.cache.enabled = False
    with connect(config=config) as store:
        engine = store.engine(retriever=retriever())
        assert engine.cache is None
        assert engine.run(QUERY).cache_hit is False
        assert engine.run(QUERY).cache_hit is False


def test_an_unreachable_database_is_one_clear_error_not_a_driver_exception() -> None:
    # Only Redis faults are fail-open: durable metrics need the database, so run() says so.
    store = connect(database_url="postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    with pytest.raises(BackendUnavailableError) as caught:
        store.engine(retriever=retriever()).run(QUERY)
    assert "is unavailable" in str(caught.value)
    assert "secret" not in str(caught.value)
