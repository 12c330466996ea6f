"""Knowledge and metrics rows typed by hand in SQL never end in a traceback.

A document whose metadata or timestamp the library cannot read is skipped by list and search
(the others still answer, a run still composes) and named by ``get``; a chunk whose count of
a term cannot be read is skipped for queries of that term, alike by the SQL ranking and the
local index; a metrics row whose timestamp cannot be read makes a report one clear error.
SQLite keeps whatever text it is given; PostgreSQL's own types accept instants Python cannot
hold (``infinity``).
"""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.unreadable import SkipWarnings
from contextstore.core.compose import Chunk
from contextstore.errors import ContextStoreError, ValidationError
from tests.factories import make_metric

# dialect → (document source → (column, value typed by hand))
TYPED = {
    "sqlite": {"b.md": ("metadata", "{not json"), "c.md": ("updated_at", "yesterday")},
    "postgresql": {
        "b.md": ("updated_at", "infinity"),
        "c.md": ("updated_at", "0001-01-01 00:00:00+05"),
    },
}
# Search reads no timestamp: only a document whose metadata cannot be read is left out.
SEARCHED = {"sqlite": ["a.md", "c.md"], "postgresql": ["a.md", "b.md", "c.md"]}


def dialect(url: str) -> str:
    return "postgresql" if url.startswith("postgresql") else "sqlite"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings = SkipWarnings(what="document", log=logging.getLogger("contextstore.core.knowledge"))
    monkeypatch.setattr("contextstore.backends.sql.knowledge.reads.DOCUMENT_WARNINGS", warnings)
    monkeypatch.setattr("contextstore.backends.sql.knowledge.queries.DOCUMENT_WARNINGS", warnings)


def test_a_document_typed_by_hand_is_skipped_and_the_others_answer(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="contextstore.core.knowledge")
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs")
    for source in ("a.md", "b.md", "c.md"):
        base.add(f"Refund policy, {source}.", source, {"team": "support"})
    typed = TYPED[dialect(database_url)]
    with engine.begin() as connection:
        for source, (column, value) in typed.items():
            connection.execute(
                sa.text(f"UPDATE documents SET {column} = :value WHERE source = :source"),
                {"value": value, "source": source},
            )
    for _ in range(2):
        assert [d.source for d in base.list()] == ["a.md"]
        found = sorted(c.source for c in base.search("refund policy", top_k=10))
        assert found == SEARCHED[dialect(database_url)]
    # one WARNING per document however many reads met it
    warned = sorted({r.getMessage().split("'")[1] for r in caplog.records})
    assert warned == sorted(typed)
    assert len([r for r in caplog.records if "skipped" in r.getMessage()]) == len(typed)
    for source, (column, _) in typed.items():
        with pytest.raises(ValidationError) as raised:
            base.get(source)
        assert raised.value.field == column
    engine.dispose()

    from contextstore.interfaces.cli.docs import app

    listed = CliRunner().invoke(
        app, ["list", "--database-url", database_url, "--namespace", "docs", "--json"]
    )
    assert listed.exit_code == 0, listed.output


PASSAGES = {
    "a.md": "failover runbook postgres primary",
    "b.md": "postgres backups restore nightly",
    "c.md": "failover drills postgres replicas",
    "d.md": "postgres tuning guide",
}
# c.md's count of "failover" typed by hand → what each query returns, in order.
WITHOUT_C = {
    "postgres failover": ["a.md", "d.md", "b.md"],
    "postgres replicas": ["c.md", "d.md", "a.md", "b.md"],
    "failover": ["a.md"],
}
WITH_C = {
    "postgres failover": ["c.md", "a.md", "d.md", "b.md"],
    "postgres replicas": ["c.md", "d.md", "a.md", "b.md"],
    "failover": ["c.md", "a.md"],
}
# JSON true reads as 1, as SQLite's json_extract gives it; 2.0 as 2.
COUNTS = {
    '"2"': WITHOUT_C,
    "2.5": WITHOUT_C,
    "-5": WITHOUT_C,
    "0": WITHOUT_C,
    "false": WITHOUT_C,
    "null": WITHOUT_C,
    "1e308": WITHOUT_C,
    "4294967296": WITHOUT_C,
    '{"n": 1}': WITHOUT_C,
    "1" + "0" * 5000: WITHOUT_C,  # more digits than Python converts to int
    "2.0": WITH_C,
    "true": {
        "postgres failover": ["a.md", "c.md", "d.md", "b.md"],
        "postgres replicas": ["c.md", "d.md", "a.md", "b.md"],
        "failover": ["a.md", "c.md"],
    },
}


def type_term_counts(engine: sa.Engine, source: str, value: str) -> None:
    """Replace ``source``'s chunk's ``term_counts`` with the JSON text ``value``."""
    cast = "CAST(:value AS jsonb)" if engine.dialect.name == "postgresql" else ":value"
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                f"UPDATE chunks SET term_counts = {cast} WHERE document_id = "
                "(SELECT id FROM documents WHERE source = :source)"
            ),
            {"value": value, "source": source},
        )


def ranked(chunks: list[Chunk]) -> list[tuple[str, float]]:
    return [(chunk.source, chunk.score) for chunk in chunks]


@pytest.mark.parametrize("count", list(COUNTS), ids=lambda count: count[:12])
def test_a_term_count_typed_by_hand_is_skipped_alike_by_sql_and_the_index(
    database_url: str, count: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="contextstore.core.knowledge")
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs")
    for source, text in PASSAGES.items():
        base.add(text, source)
    counts = {"failover": 1, "drills": 1, "postgres": 1, "replicas": 1}
    type_term_counts(engine, "c.md", json.dumps(counts).replace("1", count, 1))
    in_sql = KnowledgeBase(engine, "docs", local_index=False)
    in_index = KnowledgeBase(engine, "docs")
    assert in_index.wait_for_index()  # the build reads past the count
    for query, sources in COUNTS[count].items():
        answer = ranked(in_sql.search(query, top_k=10))
        assert [source for source, _ in answer] == sources
        assert ranked(in_index.search(query, top_k=10)) == answer
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == (0 if COUNTS[count] is WITH_C or count == "true" else 1)
    # one line naming the document and the column, the value cut short
    assert all("'c.md' skipped: term_counts" in m and len(m) < 400 for m in warned)
    engine.dispose()


def test_metadata_python_cannot_decode_skips_its_document_alike(database_url: str) -> None:
    """PostgreSQL's JSONB holds a number of 5,001 digits; Python's decoder refuses it."""
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs")
    for source, text in PASSAGES.items():
        base.add(text, source)
    cast = "CAST(:value AS jsonb)" if engine.dialect.name == "postgresql" else ":value"
    with engine.begin() as connection:
        connection.execute(
            sa.text(f"UPDATE documents SET metadata = {cast} WHERE source = 'c.md'"),
            {"value": '{"n": 1%s}' % ("0" * 5000)},
        )
    in_sql = KnowledgeBase(engine, "docs", local_index=False)
    in_index = KnowledgeBase(engine, "docs")
    assert in_index.wait_for_index()
    answer = ranked(in_sql.search("postgres replicas", top_k=10))
    assert [source for source, _ in answer] == ["d.md", "a.md", "b.md"]
    assert ranked(in_index.search("postgres replicas", top_k=10)) == answer
    assert [d.source for d in base.list()] == ["a.md", "b.md", "d.md"]
    engine.dispose()


def test_term_counts_not_an_object_never_match(database_url: str) -> None:
    """SQLite keeps an array (its items count as the terms "0" and "1"); PostgreSQL's
    trigger refuses anything but an object."""
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs")
    for source, text in PASSAGES.items():
        base.add(text, source)
    if engine.dialect.name == "postgresql":
        with pytest.raises(sa.exc.DBAPIError, match="array"):
            type_term_counts(engine, "c.md", "[1, 2]")
        return
    type_term_counts(engine, "c.md", "[1, 2]")
    in_sql = KnowledgeBase(engine, "docs", local_index=False)
    in_index = KnowledgeBase(engine, "docs")
    assert in_index.wait_for_index()
    for query in ("postgres replicas", "failover drills", "0 1"):
        answer = ranked(in_sql.search(query, top_k=10))
        assert "c.md" not in [source for source, _ in answer]
        assert ranked(in_index.search(query, top_k=10)) == answer
    engine.dispose()


def test_a_hybrid_search_skips_a_chunk_whose_counts_cannot_be_read(database_url: str) -> None:
    engine = create_database_engine(database_url)
    base = KnowledgeBase(engine, "docs", embedder="hashing")
    for source, text in PASSAGES.items():
        base.add(text, source)
    type_term_counts(engine, "c.md", '{"failover": "x", "drills": 1}')
    found = base.search("failover drills", top_k=10, mode="hybrid")
    assert [chunk.source for chunk in found] == ["a.md", "d.md"]  # d.md: by its vector alone
    engine.dispose()


def test_a_metrics_row_typed_by_hand_makes_a_report_one_clear_error(database_url: str) -> None:
    from datetime import UTC, datetime

    engine = create_database_engine(database_url)
    metrics = MetricsRepository(engine)
    metrics.record_many([make_metric(datetime(2026, 1, 2, tzinfo=UTC)) for _ in range(2)])
    bad = "yesterday" if dialect(database_url) == "sqlite" else "infinity"
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE query_metrics SET recorded_at = :bad "
                "WHERE id = (SELECT min(id) FROM query_metrics)"
            ),
            {"bad": bad},
        )
    with pytest.raises(ContextStoreError) as raised:
        metrics.report()
    assert bad in str(raised.value)
    engine.dispose()

    from contextstore.interfaces.cli.metrics import app

    result = CliRunner().invoke(app, ["report", "--all-namespaces", "--database-url", database_url])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
