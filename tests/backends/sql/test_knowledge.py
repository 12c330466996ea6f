"""The knowledge base's contract, on SQLite and on real PostgreSQL (one body, both databases)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.core.compose import Chunk
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.knowledge import content_hash
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.errors import NotFoundError, ValidationError
from contextstore.sample_data import corpus_lines, load_demo_queries
from tests.backends.sql.conftest import TickingClock
from tests.leftovers import unique_name

CORPUS_LINES = corpus_lines()


def kb(engine: sa.Engine, namespace: str | None = None, **kwargs: Any) -> KnowledgeBase:
    return KnowledgeBase(engine, namespace or f"ns_{uuid.uuid4().hex[:8]}", **kwargs)


def line(source: str, text: str, metadata: Any = None) -> str:
    record: dict[str, Any] = {"source": source, "text": text}
    if metadata is not None:
        record["metadata"] = metadata
    return json.dumps(record, ensure_ascii=False)


def hits(chunks: list[Chunk]) -> list[tuple[str, int, float]]:
    return [(c.source, c.metadata["passage"], c.score) for c in chunks]


def table_counts(engine: sa.Engine, namespace: str) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: connection.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE namespace = :ns"), {"ns": namespace}
            ).scalar_one()
            for table in ("documents", "chunks", "knowledge_terms")
        }


def stats_row(engine: sa.Engine, namespace: str) -> tuple[int, int, int] | None:
    with engine.connect() as connection:
        row = connection.execute(
            sa.text(
                "SELECT document_count, chunk_count, total_length FROM knowledge_stats "
                "WHERE namespace = :ns"
            ),
            {"ns": namespace},
        ).first()
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


def recounted(engine: sa.Engine, namespace: str) -> tuple[tuple[int, int, int], dict[str, int]]:
    """The statistics recomputed from the rows themselves, to check the triggers' counters."""
    with engine.connect() as connection:
        documents = connection.execute(
            sa.text("SELECT count(*) FROM documents WHERE namespace = :ns"), {"ns": namespace}
        ).scalar_one()
        rows = connection.execute(
            sa.text("SELECT length, term_counts FROM chunks WHERE namespace = :ns"),
            {"ns": namespace},
        ).all()
        stored = dict(
            connection.execute(
                sa.text("SELECT term, frequency FROM knowledge_terms WHERE namespace = :ns"),
                {"ns": namespace},
            ).all()
        )
    frequencies: dict[str, int] = {}
    for _, counts in rows:
        decoded = json.loads(counts) if isinstance(counts, str) else counts
        for term in decoded:
            frequencies[term] = frequencies.get(term, 0) + 1
    assert stored == frequencies
    return (int(documents), len(rows), sum(int(length) for length, _ in rows)), frequencies


# --- documents ---------------------------------------------------------------------------


def test_add_get_list_delete(engine: sa.Engine) -> None:
    base = kb(engine, "docs", clock=TickingClock())
    stored = base.add("Rotate the TLS certificates.\n\nThen reload nginx.", "ops/tls.md", {"a": 1})
    assert stored.source == "ops/tls.md"
    assert stored.metadata == {"a": 1}
    assert stored.passages == ("Rotate the TLS certificates.\n\nThen reload nginx.",)
    assert stored.chunk_count == 1
    assert stored.content_hash == content_hash(
        "Rotate the TLS certificates.\n\nThen reload nginx.", {"a": 1}
    )
    assert stored.created_at == stored.updated_at
    base.add("Refunds within 30 days.", "support/refunds.md")
    base.add("Z last", "z.md")
    assert [d.source for d in base.list()] == ["ops/tls.md", "support/refunds.md", "z.md"]
    assert [d.chunk_count for d in base.list()] == [1, 1, 1]
    assert [d.passages for d in base.list()] == [(), (), ()]
    assert [d.source for d in base.list(prefix="ops/")] == ["ops/tls.md"]
    assert [d.source for d in base.list(prefix="OPS/")] == []
    assert [d.source for d in base.list(limit=1, offset=1)] == ["support/refunds.md"]
    assert [d.source for d in base.list(offset=5)] == []
    base.delete("ops/tls.md")
    with pytest.raises(NotFoundError):
        base.get("ops/tls.md")
    with pytest.raises(NotFoundError):
        base.delete("ops/tls.md")
    assert [d.source for d in base.list()] == ["support/refunds.md", "z.md"]
    assert stats_row(engine, "docs") == recounted(engine, "docs")[0] == (2, 2, 5)


def test_a_long_document_is_split_like_the_in_memory_retriever(engine: sa.Engine) -> None:
    text = "\n\n".join(f"Paragraph {i} about failover number {i}. " * 8 for i in range(12))
    stored = kb(engine).add(text, "long.md")
    memory = InMemoryRetriever()
    assert memory.add(text, "long.md") == stored.chunk_count == len(stored.passages) > 3
    everything = memory.retrieve("paragraph", None, 100)
    assert sorted(c.text for c in everything) == sorted(stored.passages)


def test_import_is_idempotent_by_source_and_content_hash(engine: sa.Engine) -> None:
    clock = TickingClock()
    base = kb(engine, "imports", clock=clock)
    first = [line("a", "alpha text"), line("b", "beta text", {"k": "v"}), line("c", "gamma")]
    summary = base.import_jsonl(first)
    assert (summary.added, summary.updated, summary.unchanged) == (3, 0, 0)
    generation = base.generation()
    before = {d.source: d for d in base.list()}

    again = base.import_jsonl(first)
    assert (again.added, again.updated, again.unchanged) == (0, 0, 3)
    assert base.generation() == generation  # unchanged → nothing written
    assert {d.source: d for d in base.list()} == before

    changed = [line("a", "alpha text"), line("b", "beta text", {"k": "w"}), line("d", "delta")]
    summary = base.import_jsonl(changed)
    assert (summary.added, summary.updated, summary.unchanged) == (1, 1, 1)
    after = base.get("b")
    assert after.metadata == {"k": "w"}
    assert after.created_at == before["b"].created_at
    assert after.updated_at > before["b"].updated_at
    assert base.generation() > generation
    assert [d.source for d in base.list()] == ["a", "b", "c", "d"]
    assert stats_row(engine, "imports") == recounted(engine, "imports")[0]


def test_changed_text_replaces_the_passages(engine: sa.Engine) -> None:
    base = kb(engine)
    base.add("the old words: failover", "doc")
    base.add("the new words: rollback", "doc")
    assert base.get("doc").passages == ("the new words: rollback",)
    assert base.search("failover") == []
    assert [c.source for c in base.search("rollback")] == ["doc"]
    assert stats_row(engine, base.namespace) == recounted(engine, base.namespace)[0]


BAD_DOCUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"text": "", "source": "s"}, "text"),
    ({"text": "   \n", "source": "s"}, "text"),
    ({"text": "ok", "source": ""}, "source"),
    ({"text": "ok", "source": "  "}, "source"),
    ({"text": "ok", "source": "x" * 1025}, "source"),
    ({"text": None, "source": "s"}, "text"),
    ({"text": "ok", "source": 7}, "source"),
    ({"text": "nul \x00 here", "source": "s"}, "text"),
    ({"text": "ok", "source": "nul\x00"}, "source"),
    ({"text": "lone \ud800", "source": "s"}, "text"),
    ({"text": "ok", "source": "s", "metadata": "not an object"}, "metadata"),
    ({"text": "ok", "source": "s", "metadata": [1, 2]}, "metadata"),
    ({"text": "ok", "source": "s", "metadata": {"k": {1, 2}}}, "metadata"),
    ({"text": "ok", "source": "s", "metadata": {"k": float("nan")}}, "metadata"),
    ({"text": "ok", "source": "s", "metadata": {1: "int key"}}, "metadata"),
    ({"text": "ok", "source": "s", "metadata": {"k": "nul\x00"}}, "metadata"),
]


@pytest.mark.parametrize(("document", "field"), BAD_DOCUMENTS)
def test_bad_documents_are_refused_naming_the_field(
    engine: sa.Engine, document: dict[str, Any], field: str
) -> None:
    base = kb(engine)
    with pytest.raises(ValidationError) as refused:
        base.add(document["text"], document["source"], document.get("metadata"))
    assert refused.value.field == field
    assert base.list() == []
    assert stats_row(engine, base.namespace) is None


BAD_LINES: list[tuple[bytes, str]] = [
    (b'{"source": "s3", "text": ""}', "line 3.text"),
    (b'{"source": "", "text": "ok"}', "line 3.source"),
    (b'{"source": "s3", "text": "ok", "metadata": "x"}', "line 3.metadata"),
    (b'{"source": "s3", "text": "nul \\u0000"}', "line 3.text"),
    (b'{"source": "s3", "text": "\xff\xfe broken"}', "line 3"),
    (b'{"source": "s3", "text": ', "line 3"),
    (b'["not", "an", "object"]', "line 3"),
    (b'{"source": "s1", "text": "again"}', "line 3.source"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_LINES)
def test_a_half_bad_import_is_refused_whole_naming_the_line(
    engine: sa.Engine, bad: bytes, field: str
) -> None:
    base = kb(engine)
    lines = [
        b'{"source": "s1", "text": "first good"}',
        b"",
        bad,
        b'{"source": "s4", "text": "good after"}',
    ]
    with pytest.raises(ValidationError) as refused:
        base.import_jsonl(lines)
    assert refused.value.field == field
    assert table_counts(engine, base.namespace) == {
        "documents": 0,
        "chunks": 0,
        "knowledge_terms": 0,
    }


def test_namespaces_never_see_each_other(engine: sa.Engine) -> None:
    left, right = kb(engine, "left"), kb(engine, "right")
    left.add("postgres failover runbook", "shared-name.md", {"side": "left"})
    right.add("postgres failover runbook, right edition", "shared-name.md", {"side": "right"})
    right.add("refund policy", "only-right.md")
    assert [c.metadata["side"] for c in left.search("failover")] == ["left"]
    assert [c.metadata["side"] for c in right.search("failover")] == ["right"]
    assert left.search("refund") == []
    assert [d.source for d in left.list()] == ["shared-name.md"]
    with pytest.raises(NotFoundError):
        left.get("only-right.md")
    with pytest.raises(NotFoundError):
        left.delete("only-right.md")
    left.delete("shared-name.md")
    assert [d.source for d in right.list()] == ["only-right.md", "shared-name.md"]
    assert stats_row(engine, "left") == (0, 0, 0)
    assert stats_row(engine, "right") == recounted(engine, "right")[0] == (2, 2, 7)


# --- statistics and freshness, kept by triggers ---------------------------------------------


def test_sql_typed_by_hand_keeps_statistics_and_generation(engine: sa.Engine) -> None:
    base = kb(engine)
    base.import_jsonl(CORPUS_LINES[:6])
    assert stats_row(engine, base.namespace) == recounted(engine, base.namespace)[0]
    generation = base.generation()
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "DELETE FROM chunks WHERE id = (SELECT min(id) FROM chunks WHERE namespace = :ns)"
            ),
            {"ns": base.namespace},
        )
    assert base.generation() > generation
    assert stats_row(engine, base.namespace) == recounted(engine, base.namespace)[0]
    generation = base.generation()
    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE documents SET metadata = '{\"x\": 1}' WHERE namespace = :ns"),
            {"ns": base.namespace},
        )
    assert base.generation() > generation
    generation = base.generation()
    with engine.begin() as connection:
        connection.execute(
            sa.text("DELETE FROM documents WHERE namespace = :ns"), {"ns": base.namespace}
        )
    assert base.generation() > generation
    assert stats_row(engine, base.namespace) == (0, 0, 0)
    assert table_counts(engine, base.namespace)["knowledge_terms"] == 0
    assert base.search("refund") == []


def test_generation_starts_at_zero_and_only_grows(engine: sa.Engine) -> None:
    base = kb(engine)
    assert base.generation() == 0
    seen = [base.generation()]
    base.add("one", "a")
    seen.append(base.generation())
    base.add("two", "a")
    seen.append(base.generation())
    base.add("two", "a")  # unchanged: nothing written
    seen.append(base.generation())
    base.delete("a")
    seen.append(base.generation())
    assert seen[0] == 0
    assert seen[1] < seen[2] == seen[3] < seen[4]


def test_created_at_and_namespace_are_immutable(engine: sa.Engine) -> None:
    base = kb(engine)
    base.add("text", "doc")
    for assignment in ("created_at = updated_at + 1", "namespace = 'elsewhere'"):
        if "created_at" in assignment and engine.dialect.name == "postgresql":
            assignment = "created_at = created_at + interval '1 day'"
        elif "created_at" in assignment:
            assignment = "created_at = '2001-01-01 00:00:00.000000'"
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
            connection.execute(sa.text(f"UPDATE documents SET {assignment}"))


# --- search ----------------------------------------------------------------------------------


def test_search_finds_the_obvious_documents_on_the_sample_corpus(engine: sa.Engine) -> None:
    base = kb(engine)
    base.import_jsonl(CORPUS_LINES)
    assert base.search("postgres failover", 1)[0].source == "ops/runbook-postgres-failover.md"
    assert base.search("refund policy", 2)[1].source == "support/refund-policy.md"
    arabic = base.search("سياسة الاسترداد", 1)
    assert arabic[0].source == "support/ar/refund-policy-mena.md"
    assert base.search("", 5) == base.search("!!!", 5) == base.search("refund", 0) == []


def test_filters_are_metadata_equality_in_sql(engine: sa.Engine) -> None:
    base = kb(engine)
    base.import_jsonl(
        [
            line("a", "failover drill", {"team": "ops", "tier": 1, "live": True}),
            line("b", "failover notes", {"team": "support", "tier": 1.0, "live": False}),
            line("c", "failover memo", {"team": "ops", "tier": "1", "gone": None}),
            line("d", "failover list", {"team": ["ops"], "tier": 2}),
        ]
    )

    def found(filters: dict[str, Any]) -> list[str]:
        return sorted(c.source for c in base.search("failover", 10, filters))

    assert found({}) == ["a", "b", "c", "d"]
    assert found({"team": "ops"}) == ["a", "c"]
    assert found({"team": ["support", "ops"]}) == ["a", "b", "c"]
    assert found({"tier": 1}) == ["a", "b"]  # numbers by value: 1 == 1.0, never "1"
    assert found({"tier": "1"}) == ["c"]
    assert found({"live": True}) == ["a"]
    assert found({"live": False}) == ["b"]
    assert found({"gone": None}) == ["c"]
    assert found({"team": "ops", "tier": 1}) == ["a"]
    assert found({"missing": "x"}) == []
    assert found({"team": []}) == []
    for bad in ({"team": {"nested": 1}}, {"": "x"}, {'k"ey': 1}, {"k": float("inf")}):
        with pytest.raises(ValidationError) as refused:
            base.search("failover", 5, bad)
        assert refused.value.field == "filters"


def test_bad_search_arguments_are_refused(engine: sa.Engine) -> None:
    base = kb(engine)
    with pytest.raises(ValidationError) as refused:
        base.search(b"bytes", 5)  # type: ignore[arg-type]
    assert refused.value.field == "query"
    with pytest.raises(ValidationError) as refused:
        base.search("q", "5")  # type: ignore[arg-type]
    assert refused.value.field == "top_k"
    with pytest.raises(ValidationError) as refused:
        base.search("q", 5, ["not", "a", "mapping"])  # type: ignore[arg-type]
    assert refused.value.field == "filters"
    for kwargs, field in (
        ({"candidate_limit": 0}, "candidate_limit"),
        ({"keyword_weight": 1.5}, "keyword_weight"),
        ({"k1": -1.0}, "k1"),
        ({"b": 2.0}, "b"),
        ({"max_passage_chars": 0}, "max_passage_chars"),
    ):
        with pytest.raises(ValidationError) as refused:
            kb(engine, **kwargs)
        assert refused.value.field == field


def test_the_candidate_limit_bounds_what_one_search_reads_in_sql(engine: sa.Engine) -> None:
    base = kb(engine, candidate_limit=3, local_index=False)
    base.import_jsonl([line(f"d{i}", f"common word {'rare ' * (i % 3)}") for i in range(10)])
    results = base.search("common", 10)
    assert len(results) == 3
    assert {c.source for c in results} <= {f"d{i}" for i in range(10)}


def test_the_local_index_is_exact_past_the_candidate_limit(engine: sa.Engine) -> None:
    base = kb(engine, candidate_limit=3)
    lines = [line(f"d{i}", f"common word {'rare ' * (i % 3)}") for i in range(10)]
    base.import_jsonl(lines)
    # Ranked in SQL, within the candidate limit, until the index built after the write is in.
    assert len(base.search("common", 10)) == 3
    assert base.wait_for_index()
    memory = InMemoryRetriever()
    for record in map(json.loads, lines):
        memory.add(record["text"], record["source"])
    assert hits(base.search("common", 10)) == hits(memory.retrieve("common", None, 10))
    assert len(base.search("common", 10)) == 10


def test_full_text_candidates_come_from_the_index(engine: sa.Engine) -> None:
    base = kb(engine)
    base.import_jsonl(CORPUS_LINES)
    from contextstore.backends.sql.knowledge.queries import search_statement

    statement, values = search_statement(
        engine.dialect.name, base.namespace, ["failover"], {}, 1000, False
    )
    compiled = statement.compile(dialect=engine.dialect)
    params = compiled.construct_params(values)
    positions = compiled.positiontup or []
    arguments: Any = tuple(params[name] for name in positions) if compiled.positional else params
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            # A small table is cheaper to scan; forbid that to show the index serves it.
            connection.execute(sa.text("SET LOCAL enable_seqscan = off"))
            plan = "\n".join(connection.exec_driver_sql(f"EXPLAIN {compiled}", arguments).scalars())
            assert "ix_chunks_search" in plan
            assert "Seq Scan on chunks" not in plan
        else:
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", arguments).all()
            plan = "\n".join(str(row[-1]) for row in rows)
            assert "SCAN chunks_fts VIRTUAL TABLE INDEX" in plan
            assert "SCAN chunks " not in plan + " "


# --- agreement with InMemoryRetriever -----------------------------------------------------

WORDS = [
    "failover",
    "replica",
    "refund",
    "policy",
    "the",
    "of",
    "café",
    "cafe",
    "snake_case",
    "x1",
    "2024",
    "الاسترداد",
    "استرداد",
    "سياسة",
    "naïve",
    "ü",
    "a",
    "__",
    "؟؟",
]
text_strategy = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)
corpus_strategy = st.dictionaries(
    st.sampled_from([f"src-{i}" for i in range(12)] + ["Ü-doc", "z", "a/b"]),
    st.tuples(
        st.lists(text_strategy, min_size=1, max_size=3).map("\n\n".join),
        st.sampled_from(["red", "blue"]),
    ),
    min_size=1,
    max_size=8,
)
query_strategy = st.lists(st.sampled_from([*WORDS, "absent"]), min_size=0, max_size=4).map(" ".join)


class PerTextEmbedder:
    """HashingEmbedder one text at a time: the same vector whatever batch a text is in."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)

    def __repr__(self) -> str:
        return "PerTextEmbedder(16)"

    def __call__(self, text: str) -> np.ndarray:
        return self.inner(text)


def agree(
    engine: sa.Engine,
    corpus: dict[str, tuple[str, str]],
    queries: list[str],
    make: Callable[[], InMemoryRetriever],
    **kwargs: Any,
) -> None:
    base = kb(engine, max_passage_chars=40, **kwargs)
    memory = make()
    base.import_jsonl(line(s, text, {"colour": colour}) for s, (text, colour) in corpus.items())
    for source, (text, colour) in corpus.items():
        memory.add(text, source, {"colour": colour})
    for query in queries:
        for filters in (None, {"colour": "red"}):
            expected = hits(memory.retrieve(query, None, 6, filters))
            assert hits(base.search(query, 6, filters)) == expected, (query, filters)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=corpus_strategy, queries=st.lists(query_strategy, min_size=1, max_size=4))
def test_sql_and_in_memory_return_the_same_chunks_in_the_same_order(
    engine: sa.Engine, corpus: dict[str, tuple[str, str]], queries: list[str]
) -> None:
    agree(engine, corpus, queries, lambda: InMemoryRetriever(max_passage_chars=40))


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=corpus_strategy, queries=st.lists(query_strategy, min_size=1, max_size=3))
def test_fusion_agrees_with_in_memory_hybrid_ranking(
    engine: sa.Engine, corpus: dict[str, tuple[str, str]], queries: list[str]
) -> None:
    agree(
        engine,
        corpus,
        queries,
        lambda: InMemoryRetriever(PerTextEmbedder(), max_passage_chars=40),
        embed_fn=PerTextEmbedder(),
    )


def test_the_whole_sample_corpus_agrees_with_in_memory(engine: sa.Engine) -> None:
    base = kb(engine)
    base.import_jsonl(CORPUS_LINES)
    memory = InMemoryRetriever()
    for record in map(json.loads, CORPUS_LINES):
        memory.add(record["text"], record["source"], record.get("metadata"))
    texts = [demo.query for demo in load_demo_queries()]
    assert len(texts) > 5
    for query in texts:
        assert hits(base.search(query, 8)) == hits(memory.retrieve(query, None, 8)), query


# --- embeddings, computed once ------------------------------------------------------------


class CountingEmbedder:
    name = "counting-hash-16"

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.batches: list[int] = []
        self.single = 0

    def __call__(self, text: str) -> np.ndarray:
        self.single += 1
        return self.inner(text)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return self.inner.embed_many(texts)


def test_embeddings_are_computed_once_at_ingestion(engine: sa.Engine) -> None:
    embedder = CountingEmbedder()
    base = kb(engine, embed_fn=embedder)
    summary = base.import_jsonl(CORPUS_LINES[:5])
    assert summary.added == 5
    chunk_total = sum(d.chunk_count for d in base.list())
    assert embedder.batches == [chunk_total]
    assert embedder.single == 0
    base.import_jsonl(CORPUS_LINES[:5])  # unchanged: nothing embedded
    assert embedder.batches == [chunk_total]
    for _ in range(3):
        base.search("refund policy for annual plans", 3)
    assert embedder.single == 3  # the query, once per search; never a stored chunk
    with engine.connect() as connection:
        row = connection.execute(
            sa.text(
                "SELECT embedding, embedder, dimension FROM chunks WHERE namespace = :ns "
                "ORDER BY id LIMIT 1"
            ),
            {"ns": base.namespace},
        ).one()
    vector = np.frombuffer(row[0], dtype="<f4")
    assert row[1] == "counting-hash-16" and row[2] == 16 and vector.shape == (16,)
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-6)


def test_reembed_brings_other_embedders_chunks_up_to_date(engine: sa.Engine) -> None:
    namespace = unique_name("re")
    kb(engine, namespace).import_jsonl(CORPUS_LINES[:4])  # no embedder: lexical only
    embedder = CountingEmbedder()
    base = kb(engine, namespace, embed_fn=embedder)
    lexical = hits(base.search("refund", 5))
    assert lexical and all(0.0 < score <= 1.0 for _, _, score in lexical)
    progress: list[int] = []
    total = sum(d.chunk_count for d in base.list())
    assert base.reembed(progress=progress.append, batch_size=3) == total
    assert sum(progress) == total and max(progress) <= 3
    assert base.reembed() == 0
    with engine.connect() as connection:
        assert (
            connection.execute(
                sa.text("SELECT count(*) FROM chunks WHERE namespace = :ns AND embedder = :e"),
                {"ns": namespace, "e": "counting-hash-16"},
            ).scalar_one()
            == total
        )
    assert kb(engine, namespace).reembed() == 0  # no embedder: nothing to do


def test_a_plan_run_apart_finishes_as_search(engine: sa.Engine) -> None:
    """The compiled statement and the ranking are separate from their execution (the async
    knowledge base plans in a worker thread and runs the statement on the loop)."""
    base = kb(engine)
    base.import_jsonl(CORPUS_LINES[:12])
    plan = base.plan("refund policy for annual plans", 4, {"team": "support"})
    assert plan.statement is not None
    statement, values = plan.statement
    finished = plan.finish(statement.rows(values))
    assert finished == base.search("refund policy for annual plans", 4, {"team": "support"})
    assert [c.metadata["team"] for c in finished] == ["support"] * len(finished) and finished
    assert base.plan("", 4).statement is None
    assert base.plan("refund", 0).statement is None


def test_bad_arguments_to_reads_and_deletes_are_refused(engine: sa.Engine) -> None:
    base = kb(engine)
    base.add("text", "doc")
    for call, field in (
        (lambda: base.get(7), "source"),  # type: ignore[arg-type]
        (lambda: base.delete(None), "source"),  # type: ignore[arg-type]
        (lambda: base.list(prefix=3), "prefix"),  # type: ignore[arg-type]
        (lambda: base.list(limit="2"), "limit"),  # type: ignore[arg-type]
        (lambda: base.list(offset=-1), "offset"),
        (lambda: base.reembed(batch_size=0), "batch_size"),
    ):
        with pytest.raises(ValidationError) as refused:
            call()
        assert refused.value.field == field
    assert [d.source for d in base.list()] == ["doc"]
