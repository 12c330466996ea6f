"""Vector and hybrid search in the knowledge base, on SQLite (sqlite-vec), PostgreSQL without
pgvector (the system server: an exact scan) and PostgreSQL with pgvector (started by the
tests): the same chunks in the same order as ``InMemoryRetriever``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextstore.backends.sql.database import (
    alembic_config,
    create_database_engine,
    downgrade,
    migrate,
)
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.vectors import (
    EXACT_SCAN,
    PGVECTOR,
    SQLITE_VEC,
    ef_search,
    hnsw_dimensions,
)
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.errors import ValidationError
from tests.backends.sql.conftest import ALL_DATABASES
from tests.backends.sql.test_knowledge import (
    PerTextEmbedder,
    corpus_strategy,
    hits,
    line,
    query_strategy,
)
from tests.backends.sql.test_knowledge_settings import english_corpus, english_queries

pytestmark = ALL_DATABASES

RUNBOOK = "To move traffic, promote the standby replica and repoint the primary's clients."
DOCUMENTS = {
    "runbook.md": RUNBOOK,
    "refunds.md": "Refunds are paid back to the card within thirty days.",
    "vacuum.md": "Autovacuum tuning for large Postgres tables.",
}


def database(engine: sa.Engine) -> str:
    if engine.dialect.name == "sqlite":
        return "sqlite"
    with engine.connect() as connection:
        column = connection.exec_driver_sql(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).first()
    return "postgresql" if column is None else "pgvector"


def kb(engine: sa.Engine, **options: Any) -> KnowledgeBase:
    return KnowledgeBase(engine, f"ns_{uuid.uuid4().hex[:8]}", **options)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=corpus_strategy, queries=st.lists(query_strategy, min_size=1, max_size=3))
def test_every_mode_agrees_with_in_memory_on_every_database(
    engine: sa.Engine, corpus: dict[str, tuple[str, str]], queries: list[str]
) -> None:
    base = kb(engine, embed_fn=PerTextEmbedder(), max_passage_chars=40, exact_vectors=True)
    memory = InMemoryRetriever(PerTextEmbedder(), max_passage_chars=40)
    base.import_jsonl(line(s, text, {"colour": colour}) for s, (text, colour) in corpus.items())
    for source, (text, colour) in corpus.items():
        memory.add(text, source, {"colour": colour})
    for query in queries:
        for mode in ("hybrid", "lexical", "vector"):
            for filters in (None, {"colour": "red"}):
                expected = hits(memory.retrieve(query, None, 6, filters, mode=mode))
                found = hits(base.search(query, 6, filters, mode=mode))
                assert found == expected, (query, mode, filters)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=english_corpus, queries=english_queries)
def test_every_mode_agrees_with_in_memory_under_english_on_every_database(
    engine: sa.Engine, corpus: dict[str, str], queries: list[str]
) -> None:
    """Stems, stop words and joined compounds included: hybrid and vector too, not only the
    lexical ranking, give an ``english`` ``InMemoryRetriever``'s chunks, order and scores."""
    base = kb(
        engine,
        analyzer="english",
        embed_fn=PerTextEmbedder(),
        max_passage_chars=40,
        exact_vectors=True,
    )
    memory = InMemoryRetriever(PerTextEmbedder(), max_passage_chars=40, analyzer="english")
    base.import_jsonl(line(source, text) for source, text in corpus.items())
    for source, text in corpus.items():
        memory.add(text, source)
    for query in queries:
        for mode in ("hybrid", "lexical", "vector"):
            expected = hits(memory.retrieve(query, None, 6, mode=mode))
            assert hits(base.search(query, 6, mode=mode)) == expected, (query, mode)


def test_hybrid_finds_a_passage_sharing_no_word_with_the_query(engine: sa.Engine) -> None:
    base = kb(engine, embed_fn=HashingEmbedder())
    memory = InMemoryRetriever(HashingEmbedder())
    for source, text in DOCUMENTS.items():
        base.add(text, source)
        memory.add(text, source)
    query = "promoting standbys"  # neither word is in any document
    assert base.search(query, 3, mode="lexical") == []
    found = base.search(query, 3)
    assert [c.source for c in found][:1] == ["runbook.md"]
    assert hits(found) == hits(memory.retrieve(query, None, 3))
    assert hits(base.search(query, 3, mode="vector")) == hits(
        memory.retrieve(query, None, 3, mode="vector")
    )
    # The default mode is the knowledge base's own.
    lexical = kb(engine, embed_fn=HashingEmbedder(), mode="lexical")
    lexical.add(RUNBOOK, "runbook.md")
    assert lexical.search(query, 3) == []


def test_each_database_says_how_it_searches_vectors(engine: sa.Engine) -> None:
    base = kb(engine, embed_fn=HashingEmbedder())
    kind = database(engine)
    assert (
        base.vector_backend()
        == {
            "sqlite": SQLITE_VEC,
            "postgresql": EXACT_SCAN,
            "pgvector": PGVECTOR,
        }[kind]
    )
    with engine.connect() as connection:
        dimensions = hnsw_dimensions(connection)
    assert dimensions == ((256, 384, 512, 768, 1024, 1536) if kind == "pgvector" else ())
    from contextstore.interfaces.cli.db import app as db_app

    result = CliRunner().invoke(db_app, ["check", "--database-url", str(engine.url)])
    expected = {
        "sqlite": "sqlite-vec: exact scan inside SQLite",
        "postgresql": "exact scan in Python (the pgvector extension is missing)",
        "pgvector": (
            "pgvector: HNSW indexes for dimensions 256, 384, 512, 768, 1024, 1536, "
            "an exact scan for others"
        ),
    }[kind]
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == f"vector search: {expected}"


def test_hnsw_search_sets_ef_search_and_finds_what_the_exact_scan_finds(
    engine: sa.Engine,
) -> None:
    sent: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(_c: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    approximate = kb(engine, embed_fn=HashingEmbedder())
    exact = KnowledgeBase(
        engine, approximate.namespace, embed_fn=HashingEmbedder(), exact_vectors=True
    )
    approximate.import_jsonl(
        line(f"doc-{i:03d}", f"passage {i} about topic {i % 17} and theme {i % 5}")
        for i in range(120)
    )
    for query in ("topic 3 theme", "passage about something", "nothing like it"):
        for mode in ("vector", "hybrid"):
            assert hits(approximate.search(query, 10, mode=mode)) == hits(
                exact.search(query, 10, mode=mode)
            ), (query, mode)
    settings_sent = [s for s in sent if "set_config('hnsw" in s]
    if database(engine) == "pgvector":
        assert len(settings_sent) == 6  # one per search through the index
        assert all(
            f"set_config('hnsw.ef_search', '{ef_search(18)}', true)" in s
            and "set_config('hnsw.iterative_scan', 'strict_order', true)" in s
            for s in settings_sent
        )
        with engine.begin() as connection:  # local: gone with the transaction
            setting = "SELECT current_setting('hnsw.ef_search', true)"
            assert connection.exec_driver_sql(setting).scalar() in (None, "40")
    else:
        assert settings_sent == []
    assert (ef_search(1), ef_search(100), ef_search(10_000)) == (200, 400, 1000)


def test_async_search_takes_the_mode(database_url: str) -> None:
    import asyncio

    from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine

    async def main() -> tuple[list[Any], list[Any]]:
        engine = create_async_database_engine(database_url)
        try:
            base = AsyncKnowledgeBase(engine, "async_ns", embed_fn=HashingEmbedder())
            for source, text in DOCUMENTS.items():
                await base.add(text, source)
            return (
                await base.search("promoting standbys", 3, None, "hybrid"),
                await base.search("promoting standbys", 3, mode="lexical"),
            )
        finally:
            await engine.dispose()

    hybrid, lexical = asyncio.run(main())
    memory = InMemoryRetriever(HashingEmbedder())
    for source, text in DOCUMENTS.items():
        memory.add(text, source)
    assert hits(hybrid) == hits(memory.retrieve("promoting standbys", None, 3))
    assert hybrid[0].source == "runbook.md"
    assert lexical == []


def test_a_bad_mode_is_one_error_naming_the_field(engine: sa.Engine) -> None:
    base = kb(engine, embed_fn=HashingEmbedder())
    with pytest.raises(ValidationError) as caught:
        base.search("x", 3, mode="semantic")  # type: ignore[arg-type]
    assert caught.value.field == "mode"
    with pytest.raises(ValidationError) as caught:
        kb(engine).search("x", 3, mode="vector")
    assert caught.value.field == "mode"
    with pytest.raises(ValidationError) as caught:
        kb(engine, mode="semantic")  # type: ignore[arg-type]
    assert caught.value.field == "mode"


def test_chunks_of_another_embedder_have_cosine_zero(engine: sa.Engine) -> None:
    other = kb(engine, embed_fn=PerTextEmbedder())
    other.add(RUNBOOK, "runbook.md")
    base = KnowledgeBase(engine, other.namespace, embed_fn=HashingEmbedder())
    base.add(DOCUMENTS["vacuum.md"], "vacuum.md")
    memory = InMemoryRetriever(HashingEmbedder())
    memory.add(DOCUMENTS["vacuum.md"], "vacuum.md")
    # Only the vacuum note has a vector of this embedder: the runbook is never similar.
    assert [c.source for c in base.search("promoting standbys", 3, mode="vector")] == ["vacuum.md"]
    assert [c.source for c in base.search("promoting standbys", 3)] == ["vacuum.md"]


# --- the migration ------------------------------------------------------------------------


def column_names(connection: sa.Connection) -> set[str]:
    """``chunks``' columns, read without reflecting types SQLAlchemy does not know."""
    if connection.dialect.name == "sqlite":
        return {row[1] for row in connection.exec_driver_sql("PRAGMA table_info(chunks)")}
    query = (
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'chunks' AND table_schema = current_schema()"
    )
    return set(connection.exec_driver_sql(query).scalars())


def vector_objects(engine: sa.Engine) -> tuple[bool, tuple[int, ...]]:
    with engine.connect() as connection:
        columns = column_names(connection)
        return "embedding_vector" in columns, hnsw_dimensions(connection)


@pytest.fixture
def fresh_engine(empty_database_url: str) -> Iterator[sa.Engine]:
    engine = create_database_engine(empty_database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def test_0018_adds_vectors_only_where_pgvector_is_and_goes_both_ways(
    fresh_engine: sa.Engine, empty_database_url: str
) -> None:
    migrate(empty_database_url, "0017_knowledge_settings")
    base = kb(fresh_engine, embed_fn=HashingEmbedder())
    base.add(RUNBOOK, "runbook.md")  # a chunk from before: its vector is generated too
    migrate(empty_database_url)
    kind = database(fresh_engine)
    present = kind == "pgvector"
    assert vector_objects(fresh_engine) == (
        present,
        (256, 384, 512, 768, 1024, 1536) if present else (),
    )
    with fresh_engine.begin() as connection:
        command.check(alembic_config(connection))  # no drift at head
    assert base.search("promoting standbys", 1)[0].source == "runbook.md"
    downgrade(empty_database_url, "0017_knowledge_settings")
    assert vector_objects(fresh_engine) == (False, ())
    migrate(empty_database_url)
    assert vector_objects(fresh_engine)[0] is present


def test_the_generated_vector_holds_exactly_the_stored_floats(engine: sa.Engine) -> None:
    if database(engine) != "pgvector":
        assert vector_objects(engine)[0] is False
        return
    rng = np.random.default_rng(7)
    values = rng.standard_normal(256).astype(np.float32)
    values[:4] = [0.0, -0.0, 1e-45, -3.4e38]  # zero, negative zero, subnormal, huge

    class Fixed:
        name = "fixed-256"

        def __call__(self, text: str) -> np.ndarray:
            return values

    base = kb(engine, embed_fn=Fixed())
    base.add("text", "one.md")
    with engine.connect() as connection:
        stored, generated = connection.exec_driver_sql(
            "SELECT embedding, embedding_vector::real[] FROM chunks WHERE namespace = %(ns)s",
            {"ns": base.namespace},
        ).one()
    assert np.array_equal(np.frombuffer(stored, dtype="<f4"), np.asarray(generated, np.float32))
