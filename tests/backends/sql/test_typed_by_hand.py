"""Knowledge and metrics rows typed by hand in SQL never end in a traceback.

A document whose metadata or timestamp the library cannot read is skipped by list and search
(the others still answer, a run still composes) and named by ``get``; a metrics row whose
timestamp cannot be read makes a report one clear error. SQLite keeps whatever text it is
given; PostgreSQL's own types accept instants Python cannot hold (``infinity``).
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.unreadable import SkipWarnings
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
