"""``contextstore fleet`` starts real worker processes; its report counts what SQL holds.

Also a smoke test of ``python -m benchmarks`` on its cheapest section.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore.interfaces.cli import app
from contextstore.sample_data import corpus_lines
from tests import REPO_ROOT

REPO = REPO_ROOT
ENVIRONMENT = ("CONTEXTSTORE_DATABASE_URL", "CONTEXTSTORE_REDIS_URL", "CONTEXTSTORE_NAMESPACE")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command must take its backends from the options, not from this machine."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def run_fleet(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["fleet", *args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def sql_count(url: str, fleet_id: str) -> int:
    """The count a user would run by hand, exactly as the command prints it."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            statement = f"SELECT count(*) FROM query_metrics WHERE worker LIKE 'fleet-{fleet_id}-%'"
            return int(connection.execute(sa.text(statement)).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.usefixtures("clean_env")
def test_fleet_on_a_shared_sqlite_file_with_memory_backends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    report = run_fleet("--workers", "2", "--queries", "10", "--database-url", url)
    assert report["failures"] == []
    assert report["runs"] == report["expected_runs"] == 20
    assert report["sql_count"] == 20
    assert sql_count(url, report["fleet_id"]) == 20
    assert report["count_sql"].endswith(f"LIKE 'fleet-{report['fleet_id']}-%'")
    # The sample documents went into the namespace's knowledge base, once.
    documents = len(corpus_lines())
    assert report["sample_documents"] == {"added": documents, "updated": 0, "unchanged": 0}
    again = run_fleet("--workers", "1", "--queries", "2", "--database-url", url)
    assert again["sample_documents"] == {"added": 0, "updated": 0, "unchanged": documents}


@pytest.mark.slow
@pytest.mark.usefixtures("clean_env")
def test_fleet_without_configuration_says_what_it_falls_back_to(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    result = CliRunner().invoke(
        app, ["fleet", "--workers", "1", "--queries", "2", "--database-url", url, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "no PostgreSQL or Redis configured" in result.stderr
    assert "process-memory cache" in result.stderr


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.usefixtures("clean_env")
def test_fleet_on_postgres_and_redis(
    postgres_server_url: str, redis_url: str, namespace: str
) -> None:
    try:
        report = run_fleet(
            "--workers", "4", "--queries", "25",
            "--database-url", postgres_server_url,
            "--redis-url", redis_url,
            "--namespace", namespace,
        )  # fmt: skip
        assert report["failures"] == []
        assert report["runs"] == report["expected_runs"] == 100
        assert sql_count(postgres_server_url, report["fleet_id"]) == 100
        # One shared cache: its fleet-wide counters saw every run of every worker, and its
        # hits are exactly the runs SQL recorded as hits. (How many hit depends on how the
        # workers race through the same queries, so no bound on the rate is asserted.)
        from contextstore.backends.redis.cache import RedisContextCache
        from contextstore.backends.redis.client import client_from_url

        stats = RedisContextCache(client_from_url(redis_url), namespace=namespace).stats()
        assert stats["hits"] + stats["misses"] == 100
        assert stats["hits"] == round(report["cache_hit_rate"] * 100)
        assert stats["hits"] > 0
    finally:
        import redis

        from contextstore.backends.redis.keys import namespace_pattern

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=namespace_pattern(namespace), count=500):
            client.delete(key)
        client.close()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--workers", "0", "--workers must be 1–64"),
        ("--queries", "0", "--queries must be at least 1"),
        ("--workers", "-2", "--workers must be 1–64"),
        ("--workers", "65", "--workers must be 1–64"),
        ("--workers", "100000", "--workers must be 1–64, got 100000"),
    ],
)
@pytest.mark.usefixtures("clean_env")
def test_fleet_refuses_bad_counts_in_one_line(
    tmp_path: Path, option: str, value: str, says: str
) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    result = CliRunner().invoke(app, ["fleet", option, value, "--database-url", url])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert says in result.stderr
    assert not (tmp_path / "fleet.db").exists()  # refused before anything was opened


@pytest.mark.usefixtures("clean_env")
def test_fleet_refuses_an_in_memory_sqlite_database() -> None:
    result = CliRunner().invoke(app, ["fleet", "--database-url", "sqlite://"])
    assert result.exit_code == 2
    assert "in-memory SQLite" in result.stderr


@pytest.mark.slow
def test_benchmark_smoke_writes_markdown_and_json(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--sections", "memory-cache",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    markdown = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert "| Memory cache |" in markdown
    assert "cachetools.TTLCache" in markdown
    data = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert len(data["rows"]) == 4
    assert all(row["ratio"] > 0 for row in data["rows"])
