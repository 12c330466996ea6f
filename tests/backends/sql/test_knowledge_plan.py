"""PostgreSQL's plan for a search: the GIN index finds the matches, each match's document is
read by its primary key, and nothing grows with the rest of the corpus.

The corpus here is made inside PostgreSQL (one statement per table, the triggers firing once
each) and analysed, so the planner sees a table of the size where a plain join turned into a
hash join over every document of the namespace.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.sample_data import corpus_lines
from tests.backends.sql.conftest import POSTGRES_ONLY
from tests.leftovers import unique_name

pytestmark = POSTGRES_ONLY

DOCUMENTS = 20_000
MATCHES = 40  # documents holding one of the query's words, whatever the corpus size
QUERY = "needle0 needle1 needle2 needle3"  # rare words: the planner guesses how rare


def load(engine: sa.Engine, namespace: str) -> None:
    """``DOCUMENTS`` one-chunk documents of 31 words from 3,000 (each in about 1 % of them,
    so the planner's statistics cannot list them all); ``needle`` occurs in ``MATCHES``."""
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO documents (namespace, source, metadata, content_hash) "
                "SELECT :ns, 'doc/' || n, jsonb_build_object('shard', n % 8), md5(n::text) "
                "FROM generate_series(1, :count) n"
            ),
            {"ns": namespace, "count": DOCUMENTS},
        )
        connection.execute(
            sa.text(
                "INSERT INTO chunks (document_id, namespace, position, text, terms, "
                "term_counts, length) "
                "SELECT d.id, d.namespace, 0, w.words, w.words, (SELECT jsonb_object_agg(t, 1) "
                "FROM (SELECT DISTINCT unnest(string_to_array(w.words, ' ')) AS t) u), 31 "
                "FROM documents d CROSS JOIN LATERAL ("
                "  SELECT string_agg('w' || ((d.id * k + 7 * k) % 3000), ' ') || CASE"
                "  WHEN d.id % CAST(:every AS integer) = 0"
                "  THEN ' needle' || (d.id / CAST(:every AS integer) % 4) ELSE ' hay' END AS words"
                "  FROM generate_series(1, 30) k"
                ") w WHERE d.namespace = :ns"
            ),
            {"ns": namespace, "every": DOCUMENTS // MATCHES},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(sa.text("ANALYZE"))


def plan_of(engine: sa.Engine, base: KnowledgeBase, query: str, **filters: object) -> str:
    plan = base.plan(query, 5, filters or None)
    assert plan.statement is not None
    statement, values = plan.statement
    with engine.connect() as connection:
        return "\n".join(
            connection.exec_driver_sql(
                f"EXPLAIN {statement.sql}", statement.parameters(values)
            ).scalars()
        )


def test_each_match_reads_its_document_by_primary_key(engine: sa.Engine) -> None:
    namespace = unique_name("plan")
    load(engine, namespace)
    base = KnowledgeBase(engine, namespace)
    assert len(base.search(QUERY, 100)) == MATCHES
    for plan in (plan_of(engine, base, QUERY), plan_of(engine, base, QUERY, shard=0)):
        assert "Bitmap Index Scan on ix_chunks_search" in plan, plan
        assert "Index Scan using pk_documents on documents" in plan, plan
        assert "Seq Scan on chunks" not in plan and "Seq Scan on documents" not in plan, plan
        assert "Hash" not in plan, plan


def test_the_search_index_keeps_no_pending_list(engine: sa.Engine) -> None:
    """Written straight into the index: nothing is left for a search to read linearly."""
    base = KnowledgeBase(engine, f"gin_{uuid.uuid4().hex[:8]}")
    base.import_jsonl(corpus_lines())
    base.add("one more document about failover", "extra")
    with engine.connect() as connection:
        options = connection.execute(
            sa.text("SELECT reloptions FROM pg_class WHERE oid = 'ix_chunks_search'::regclass")
        ).scalar_one()
        pending = connection.execute(
            sa.text("SELECT gin_clean_pending_list('ix_chunks_search'::regclass)")
        ).scalar_one()
    assert options == ["fastupdate=off"]
    assert pending == 0
