"""LangChain's own standard suites, unmodified, over a store on a temporary SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

from contextstore import Store, connect
from contextstore.interfaces.integrations.langchain import (
    ContextStoreRetriever,
    ContextStoreVectorStore,
)

# The suites write their async tests without a marker (they expect asyncio's auto mode);
# the project runs pytest-asyncio in strict mode, so every test of the module is marked, and
# the sync ones ignore the mark.
pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.filterwarnings("ignore:.*is marked with '@pytest.mark.asyncio' but it is not"),
]

RUNBOOKS = {
    "runbooks/failover.md": "Fail over Postgres by promoting the replica with the least lag.",
    "runbooks/backup.md": "Postgres backups run nightly; restore one to a scratch replica.",
    "runbooks/upgrade.md": "Upgrade Postgres one replica at a time, the primary last.",
    "runbooks/vacuum.md": "Postgres autovacuum falls behind on tables with heavy churn.",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with connect(database_url=f"sqlite:///{tmp_path / 'lc.db'}", redis_url="") as opened:
        yield opened


class TestRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _corpus(self, store: Store) -> None:
        for source, text in RUNBOOKS.items():
            store.knowledge.add(text, source, {"team": "db"})
        self._store = store

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return ContextStoreRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"store": self._store, "top_k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "How do I operate a Postgres replica?"

    @property
    def num_results_arg_name(self) -> str:
        return "top_k"


class TestVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, store: Store) -> VectorStore:
        return ContextStoreVectorStore(store=store, embedding=self.get_embeddings())
