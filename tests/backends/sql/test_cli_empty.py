"""An empty result says so: one line in a table, a valid empty document in the other formats
(JSON ``[]`` for a list, the report's object with zero counts for a report; CSV its header
alone; plain nothing). On SQLite and PostgreSQL; the cache and adaptive commands on Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.interfaces.cli import app
from tests.backends.redis import drop_namespace
from tests.factories import make_metric
from tests.leftovers import unique_name

LESSON_FIELDS = (
    "entity_id,status,severity,created_at,updated_at,summary,detail,injection_form,"
    "applies_to,superseded_by,evidence\n"
)
USAGE_FIELDS = "entity_id,status,runs_matched,runs_included,last_included_at\n"
GROUP_FIELDS = (
    "key,runs,p50_ms,p95_ms,p99_ms,mean_context_length,guard_failure_rate,cache_hit_rate,"
    "lessons_matched_total,lessons_matched_mean,lessons_included_total,"
    "lessons_included_mean,first_recorded_at,last_recorded_at\n"
)


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80", **(env or {})})
    assert result.exit_code == 0, result.output
    return result


def outputs(*args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The command's stdout as a table and with --format plain, csv and json."""
    return {
        fmt: run(*args, *(("--format", fmt) if fmt != "table" else ()), env=env).stdout
        for fmt in ("table", "plain", "csv", "json")
    }


def test_empty_lessons_documents_and_matches(database_url: str) -> None:
    db = ("--database-url", database_url)
    assert outputs("lessons", "list", *db) == {
        "table": "no lessons\n",
        "plain": "",
        "csv": LESSON_FIELDS,
        "json": "[]\n",
    }
    assert run("lessons", "list", "--status", "retired", *db).stdout == (
        "no lessons match these filters\n"
    )
    assert outputs("docs", "list", *db, "--namespace", "empty") == {
        "table": "no documents in namespace 'empty'\n",
        "plain": "",
        "csv": "source,metadata,content_hash,chunks,created_at,updated_at\n",
        "json": "[]\n",
    }
    assert run("docs", "list", *db, "--prefix", "ops/", "--offset", "2").stdout == (
        "no documents in namespace 'default' with a source starting with 'ops/' after the first 2\n"
    )
    searched = outputs("docs", "search", "failover", *db, env={"CONTEXTSTORE_NAMESPACE": "e"})
    assert searched == {
        "table": "no passage in namespace 'e' matches 'failover'\n",
        "plain": "",
        "csv": "source,passage,score,text,metadata\n",
        "json": "[]\n",
    }
    assert run("match", "--tag", "nobody", *db).stdout == (
        "matched 0, showing 0: no lesson applies to this scope\n"
    )
    assert run("match", "--tag", "nobody", "--explain", *db).stdout == (
        "matched 0, showing 0: no lesson to explain\n"
    )
    assert json.loads(run("match", "--tag", "nobody", "--explain", "--json", *db).stdout) == {
        "lessons": {"matched_count": 0, "included_count": 0, "included": []},
        "lesson_block": "",
        "explanation": [],
    }
    vectors = (
        "sqlite-vec: exact scan inside SQLite"
        if database_url.startswith("sqlite")
        else "exact scan in Python (the pgvector extension is missing)"
    )
    assert run("db", "check", *db).stdout == (f"every lesson row reads\nvector search: {vectors}\n")


def test_empty_reports(database_url: str) -> None:
    db = ("--database-url", database_url)
    engine = create_database_engine(database_url)
    LessonRepository(engine).add(
        LessonRecord("ops.a", "Form.", status="active", applies_to=("tag:ops",))
    )
    # Runs in another namespace, none of them including a lesson.
    MetricsRepository(engine).record(make_metric(datetime.now(UTC), namespace="busy"))
    engine.dispose()
    nobody = {"CONTEXTSTORE_NAMESPACE": "nobody"}
    stats = outputs("lessons", "stats", *db, env=nobody)
    assert stats["table"] == (
        "no runs recorded in namespace 'nobody'; 1 active lesson, none included\n"
    )
    assert (stats["plain"], stats["csv"]) == (
        "ops.a\tactive\t0\t0\t\n",
        USAGE_FIELDS + "ops.a,active,0,0,\n",
    )
    assert json.loads(stats["json"]) == {
        "runs": 0,
        "lessons": [],
        "unused": ["ops.a"],
        "since": None,
        "until": None,
        "namespace": "nobody",
    }
    report = run("metrics", "report", *db, env=nobody).stdout
    assert report == "no runs recorded: namespace 'nobody', all workers\n"
    empty_report = json.loads(run("metrics", "report", "--json", *db, env=nobody).stdout)
    assert (empty_report["runs"], empty_report["p50_ms"], empty_report["groups"]) == (0, None, [])
    grouped = outputs("metrics", "report", "--by", "lesson", *db, env=nobody)
    assert (grouped["plain"], grouped["csv"]) == ("", GROUP_FIELDS)
    assert json.loads(grouped["json"])["groups"] == []
    # Runs, but none included a lesson: the report, then one line for the groups.
    busy = run("metrics", "report", "--by", "lesson", *db, "--namespace", "busy").stdout
    assert busy.splitlines()[0] == "Query metrics · namespace 'busy', all workers"
    assert busy.splitlines()[-1] == "By lesson: no group"


def test_no_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert outputs("keys", "list", "--file", str(path)) == {
        "table": f"no keys in {path}\n",
        "plain": "",
        "csv": "id,namespace,role,created_at,label\n",
        "json": "[]\n",
    }
    shown = run("keys", "list", "--file", str(path), env={"CONTEXTSTORE_NAMESPACE": "x"})
    assert shown.stdout == f"no keys of namespace 'x' in {path}\n"


def test_empty_cache_and_windows_on_redis(redis_url: str) -> None:
    namespace = unique_name("empty")
    where = f"namespace {namespace!r} at {redis_url}"
    env = {"CONTEXTSTORE_REDIS_URL": redis_url, "CONTEXTSTORE_NAMESPACE": namespace}
    try:
        assert run("cache", "stats", env=env).stdout == (
            f"the context cache of {where} is empty: no entries, no lookups\n"
        )
        assert json.loads(run("cache", "stats", "--json", env=env).stdout)["size"] == 0
        assert run("cache", "clear", env=env).stdout == (
            f"cleared 0 entries: the context cache of {where} was empty\n"
        )
        assert run("adaptive", "report", env=env).stdout == (
            f"no runs recorded in the adaptive windows of {where}\n"
        )
        assert json.loads(run("adaptive", "report", "--json", env=env).stdout)["samples"] == 0
    finally:
        client = redis.Redis.from_url(redis_url)
        drop_namespace(client, namespace)
        client.close()


def test_without_redis_each_command_is_one_line(tmp_path: Path) -> None:
    env = {"CONTEXTSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    note = (
        "no Redis URL: {} in each process's memory, so namespace 'default' has nothing "
        "shared to show here (set --redis-url or CONTEXTSTORE_REDIS_URL)\n"
    )
    assert run("cache", "stats", env=env).stdout == note.format("the cache lives")
    assert run("cache", "clear", env=env).stdout == note.format("the cache lives")
    assert run("adaptive", "report", env=env).stdout == note.format("the windows live")
