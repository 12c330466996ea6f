"""The knowledge base's local index: its top-k is the full ranking's, on SQLite and PostgreSQL.

Random corpora with skewed term frequencies (stop words dominate, as in prose) and queries
that are often mostly stop words. Each search is compared with BM25 computed the plain way
(``ranking.rank`` over every passage of the namespace) and with ``InMemoryRetriever``: the
same chunks, the same floats, the same order, with either analyzer, with and without
filters, and after writes that make the index stale.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.index import snapshot_from_rows
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import DocumentInput
from contextstore.core.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    rank,
    saturation,
)
from contextstore.core.retrieval import InMemoryRetriever

STOPS = ["the", "of", "and", "to", "is", "in", "it"]
WORDS = [*STOPS, *(f"w{i}" for i in range(60))]
WEIGHTS = np.array([25.0] * len(STOPS) + [1.0 / (i + 1) ** 1.2 for i in range(60)])
PASSAGE_CHARS = 60

Hit = tuple[str, int, float]
Corpus = list[tuple[str, str, dict[str, Any]]]


def hits(chunks: list[Chunk]) -> list[Hit]:
    return [(c.source, c.metadata["passage"], c.score) for c in chunks]


@st.composite
def corpora(draw: st.DrawFn) -> Corpus:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    documents = []
    for number in range(draw(st.integers(1, 40))):
        words = rng.choice(WORDS, size=int(rng.integers(1, 45)), p=WEIGHTS / WEIGHTS.sum())
        text = " ".join(words)
        if documents and rng.random() < 0.3:
            # The same text under another source: equal scores, ordered by source.
            text = documents[int(rng.integers(len(documents)))][0]
        documents.append((text, f"s{number:03d}", {"group": number % 3}))
    return documents


queries = st.lists(
    st.one_of(st.sampled_from(STOPS), st.sampled_from(WORDS)), min_size=1, max_size=14
).map(" ".join)


def full_ranking(memory: InMemoryRetriever, query: str, top_k: int, group: int | None) -> list[Hit]:
    """BM25 of every passage, no pruning, through ``ranking.rank``."""
    index = memory._current_index()
    weighted = dict(memory.analyzer.weighted_query_terms(query))
    terms = list(weighted)
    candidates = []
    for passage in index.passages:
        if group is not None and passage.metadata["group"] != group:
            continue
        counts = dict(zip(passage.terms, passage.counts, strict=True))
        candidates.append(
            Candidate(
                passage.text, passage.source, passage.position, passage.length, counts,
                passage.metadata,
            )
        )  # fmt: skip
    statistics = CorpusStatistics(
        len(index.passages), index.total_length, {t: index.frequency(t) for t in terms}
    )
    return hits(rank(candidates, terms, statistics, RankingParameters(), top_k, None, weighted))


def memory_of(documents: Corpus, analyzer: str) -> InMemoryRetriever:
    memory = InMemoryRetriever(max_passage_chars=PASSAGE_CHARS, analyzer=analyzer)
    for text, source, metadata in documents:
        memory.add(text, source, metadata)
    return memory


def check(
    base: KnowledgeBase,
    documents: Corpus,
    searches: list[tuple[str, int, int | None]],
    analyzer: str = "simple",
) -> None:
    memory = memory_of(documents, analyzer)
    for query, top_k, group in searches:
        filters = None if group is None else {"group": group}
        found = hits(base.search(query, top_k, filters))
        assert found == full_ranking(memory, query, top_k, group), query
        assert found == hits(memory.retrieve(query, None, top_k, filters)), query


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    documents=corpora(),
    searches=st.lists(
        st.tuples(queries, st.integers(1, 12), st.sampled_from([None, 0, 2])),
        min_size=1,
        max_size=4,
    ),
    extra=corpora(),
    analyzer=st.sampled_from(["simple", "english"]),
)
def test_the_local_top_k_is_the_full_ranking(
    engine: sa.Engine,
    documents: Corpus,
    searches: list[tuple[str, int, int | None]],
    extra: Corpus,
    analyzer: str,
) -> None:
    base = KnowledgeBase(
        engine,
        f"topk_{uuid.uuid4().hex[:10]}",
        analyzer=analyzer,
        max_passage_chars=PASSAGE_CHARS,
        candidate_limit=1,
    )
    base.import_documents([DocumentInput(source=s, text=t, metadata=m) for t, s, m in documents])
    # Right after a write searches are ranked in SQL (exact only within the candidate limit,
    # 1 here): the index, built in the background, is waited for.
    assert base.wait_for_index()
    check(base, documents, searches, analyzer)
    assert base.local is not None and base.local.builds == 1
    # A write moves the generation: the index is rebuilt (a new document, one replaced, one
    # deleted), and once it is, it ranks the namespace as it is now.
    renamed = [(text, f"x{source}", metadata) for text, source, metadata in extra[:5]]
    changed = (documents[0][0] + " w1 w1", documents[0][1], documents[0][2])
    base.import_documents(
        [DocumentInput(source=s, text=t, metadata=m) for t, s, m in [*renamed, changed]]
    )
    current = [changed, *documents[1:], *renamed]
    if len(documents) > 1:
        base.delete(documents[-1][1])
        current.remove(documents[-1])
    assert base.wait_for_index()
    check(base, current, searches, analyzer)
    assert base.local.builds == 2


def test_a_namespace_written_by_another_process_is_seen_at_once(engine: sa.Engine) -> None:
    """Right after each write (ranked in SQL while the index is rebuilt), and through the
    rebuilt index."""
    namespace = f"topk_{uuid.uuid4().hex[:10]}"
    reader, writer = KnowledgeBase(engine, namespace), KnowledgeBase(engine, namespace)
    writer.add("the refund policy of the shop", "a.md")
    for _ in range(2):
        assert [c.source for c in reader.search("refund policy", 3)] == ["a.md"]
        assert reader.wait_for_index()
    writer.add("a refund needs a receipt", "b.md")
    for _ in range(2):
        assert [c.source for c in reader.search("receipt", 3)] == ["b.md"]
        assert reader.wait_for_index()
    writer.delete("a.md")
    for _ in range(2):
        assert [c.source for c in reader.search("refund", 3)] == ["b.md"]
        assert reader.wait_for_index()
    assert reader.local is not None and reader.local.builds == 3


@pytest.mark.parametrize("embedded", [False, True])
def test_the_local_index_serves_lexical_searches_only(engine: sa.Engine, embedded: bool) -> None:
    from contextstore.core.embedding import HashingEmbedder

    options: dict[str, Any] = {"embed_fn": HashingEmbedder(dim=16)} if embedded else {}
    base = KnowledgeBase(engine, f"topk_{uuid.uuid4().hex[:10]}", **options)
    base.add("the refund policy", "a.md")
    assert [c.source for c in base.search("refund", 3)] == ["a.md"]
    assert base.wait_for_index() is not embedded
    assert base.local is not None and base.local.builds == (0 if embedded else 1)
    assert base.local.state.started == (0 if embedded else 1)
    assert KnowledgeBase(engine, "x", local_index=False).local is None


def test_a_namespace_larger_than_the_bound_is_searched_in_sql(engine: sa.Engine) -> None:
    from contextstore.backends.sql.knowledge.index import LocalIndex

    base = KnowledgeBase(engine, f"topk_{uuid.uuid4().hex[:10]}", candidate_limit=2)
    assert base.local is not None
    base.local = LocalIndex(engine, base.namespace, base.parameters, max_chunks=2)
    base.import_documents(
        [DocumentInput(source=f"d{i}", text=f"common word {i}") for i in range(3)]
    )
    # Three chunks, a bound of two: the SQL search answers, bounded by its candidate limit.
    assert len(base.search("common", 10)) == 2
    assert not base.wait_for_index()
    assert len(base.search("common", 10)) == 2
    assert base.local.snapshot is None and base.local.builds == 0


def test_a_build_consumes_its_rows_and_keeps_each_chunks_fields() -> None:
    """``snapshot_from_rows`` reads each row once and empties both lists, so that the rows'
    memory is free before the postings are sorted; every chunk keeps its id, document,
    position and the length its saturations were computed with."""
    chunks: list[Any] = [
        (11, 7, 0, 3, '{"refund": 2, "the": 1}'),
        (12, 9, 0, 1, {"receipt": 1}),
        (15, 7, 1, 4, '{"the": 3, "receipt": 1}'),
    ]
    documents: list[Any] = [(9, "b.md", "{}"), (7, "a.md", '{"team": "ops"}')]
    parameters = RankingParameters()
    snapshot = snapshot_from_rows(4, 2, chunks, documents, parameters)
    assert chunks == [] and documents == []
    assert snapshot.chunk_ids.tolist() == [11, 12, 15]
    assert [snapshot.sources[d] for d in snapshot.documents] == ["a.md", "b.md", "a.md"]
    assert snapshot.positions.tolist() == [0, 0, 1]
    assert snapshot.metadata[snapshot.documents[0]] == {"team": "ops"}
    row = snapshot.vocabulary["the"]
    start, end = int(snapshot.ptr[row]), int(snapshot.ptr[row + 1])
    assert snapshot.docs[start:end].tolist() == [0, 2]
    average = (3 + 1 + 4) / 3
    k1, b = parameters.k1, parameters.b
    wanted = saturation(np.array([1.0, 3.0]), np.array([3.0, 4.0]), average, k1, b)
    assert snapshot.saturations[start:end].tolist() == wanted.tolist()
