"""With WordLlama, vector and hybrid search find a passage that shares no word with the query."""

from __future__ import annotations

import pytest

from contextstore.backends.embedders import WordLlamaEmbedder
from contextstore.core.retrieval import InMemoryRetriever

QUERY = "How do I fail over Postgres?"
RUNBOOK = "ops/promote-standby.md"
DOCUMENTS = [
    (
        "When the primary PostgreSQL node dies, promote the standby replica with the least "
        "replication lag using pg_ctl promote, then point the connection pooler at it.",
        RUNBOOK,
    ),
    ("Refunds: a customer who cancels within 14 days gets the first charge back.", "refunds.md"),
    ("Rotate the TLS certificates on the load balancers every 90 days.", "tls.md"),
    ("Deploys fail when the build disk is over 90% full: clear the cache and retry.", "ci.md"),
    ("The quarterly roadmap review is held over two days with every team lead.", "roadmap.md"),
    ("Invoices are emailed on the first business day of each month.", "invoices.md"),
]


@pytest.mark.parametrize("analyzer", ["simple", "english"])
def test_meaning_finds_the_runbook_that_never_says_fail_over(analyzer: str) -> None:
    retriever = InMemoryRetriever(WordLlamaEmbedder(), analyzer=analyzer)
    retriever.add_documents(DOCUMENTS)
    lexical = [c.source for c in retriever.retrieve(QUERY, None, 3, mode="lexical")]
    vector = [c.source for c in retriever.retrieve(QUERY, None, 3, mode="vector")]
    hybrid = [c.source for c in retriever.retrieve(QUERY, None, 3, mode="hybrid")]
    assert RUNBOOK not in lexical  # no shared word: keywords cannot find it
    assert lexical == ["ci.md", "roadmap.md"]
    assert vector[0] == RUNBOOK
    assert hybrid[:2] == ["ci.md", RUNBOOK]
