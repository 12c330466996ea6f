"""``contextstore run`` reads the database and namespace it is given and writes only its run's
metrics row; ``contextstore demo`` alone loads the sample. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from contextstore import connect
from contextstore.core.lessons import LessonRecord
from contextstore.interfaces.cli import app
from tests.backends.sql.conftest import database_url, empty_database_url

__all__ = ["database_url", "empty_database_url"]  # fixtures, re-used from tests/backends/sql


def run(database_url: str, namespace: str) -> dict[str, object]:
    result = CliRunner().invoke(
        app,
        [
            *("run", "How do I fail over Postgres?", "--tag", "ops", "--json"),
            *("--database-url", database_url, "--namespace", namespace),
        ],
    )
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_run_writes_no_sample_into_the_database_it_points_at(database_url: str) -> None:
    with connect(database_url=database_url, redis_url="", namespace="tenant-a") as store:
        text = "To fail over Postgres, promote the replica once its lag is under 5 s."
        store.knowledge.add(text, "ops/lag.md")
        store.lessons.add(
            LessonRecord("ops.lag", "Check the lag.", status="active", applies_to=("tag:ops",))
        )
    empty = run(database_url, "tenant-b")
    assert empty["chunks_used"] == [] and empty["lessons"]["matched_count"] == 1  # type: ignore[index]
    found = run(database_url, "tenant-a")
    assert [chunk["source"] for chunk in found["chunks_used"]] == ["ops/lag.md"]  # type: ignore[attr-defined, index]
    for namespace, sources in (("tenant-a", ["ops/lag.md"]), ("tenant-b", [])):
        with connect(database_url=database_url, redis_url="", namespace=namespace) as store:
            assert [document.source for document in store.knowledge.list()] == sources
            assert store.metrics.count(namespace=namespace) == 1
    with connect(database_url=database_url, redis_url="") as store:
        assert [record.entity_id for record in store.lessons.list()] == ["ops.lag"]
