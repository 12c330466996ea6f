"""Every command touching a namespace's state honours ``CONTEXTSTORE_NAMESPACE`` unless
``--namespace`` is given, through the one shared option; on SQLite and PostgreSQL (the Redis
commands on the shared Redis server).

The command tree is walked: every command is either namespaced (and then proven below, with
two namespaces holding different data) or listed with the reason it is not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
import typer
from typer.testing import CliRunner, Result

from contextstore.backends.redis.cache import RedisContextCache
from contextstore.backends.redis.windows import RedisWindows
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.windows import Sample
from contextstore.core.metrics import RunTrace
from contextstore.interfaces.apikeys import add_key, read_entries
from contextstore.interfaces.cli import app
from contextstore.interfaces.cli.options import NAMESPACE_HELP
from contextstore.sample_data import load_demo_queries
from tests.backends.redis import drop_namespace
from tests.factories import make_metric
from tests.leftovers import unique_name

# Commands that read or write one namespace's state (or, for reports, select by namespace).
NAMESPACED = {
    "adaptive report",
    "cache clear",
    "cache stats",
    "config show",
    "demo",
    "docs add",
    "docs configure",
    "docs delete",
    "docs import",
    "docs list",
    "docs reembed",
    "docs search",
    "docs settings",
    "docs show",
    "fleet",
    "keys add",
    "keys list",
    "lessons proposal-limit",
    "lessons stats",
    "mcp",
    "metrics prune",
    "metrics report",
    "run",
}
# The others, and why no namespace applies to them.
SHARED_BY_EVERY_NAMESPACE = {
    **dict.fromkeys(
        [
            "lessons activate",
            "lessons add",
            "lessons delete",
            "lessons edit",
            "lessons export",
            "lessons import",
            "lessons list",
            "lessons reject",
            "lessons retire",
            "lessons show",
            "lessons supersede",
            "match",
        ],
        "lessons are shared by every namespace (docs/design/storage.md)",
    ),
    **dict.fromkeys(
        ["db check", "db current", "db downgrade", "db grant-service-role", "db upgrade"],
        "the schema is the database's",
    ),
    "keys revoke": "a key is named by its id, whatever its namespace",
    "serve": "each request's API key names its namespace",
}


def leaves(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every command under ``command`` by its path (typer's own click copy: duck-typed)."""
    children = getattr(command, "commands", None)
    if children is None:
        yield path, command
        return
    for name, child in children.items():
        yield from leaves(child, f"{path} {name}".strip())


def test_every_command_is_namespaced_through_the_shared_option_or_has_no_namespace() -> None:
    commands = dict(leaves(typer.main.get_command(app)))
    assert set(commands) == NAMESPACED | set(SHARED_BY_EVERY_NAMESPACE)
    assert not NAMESPACED & set(SHARED_BY_EVERY_NAMESPACE)
    for path, command in commands.items():
        options = [param for param in command.params if "--namespace" in param.opts]
        if path in NAMESPACED:
            (option,) = options
            assert (option.opts, option.help, option.default, option.is_flag) == (
                ["--namespace"],
                NAMESPACE_HELP,
                None,
                False,
            ), path
        else:
            assert options == [], path


# -- each namespaced command, with two namespaces holding different data -------------------


@dataclass(frozen=True)
class World:
    """One round: a database, the shared Redis (or none), a key file, and two namespaces
    of their own, ``x`` and ``y``."""

    engine: sa.Engine
    redis_url: str | None
    key_file: Path
    x: str
    y: str

    def metrics(self) -> MetricsRepository:
        return MetricsRepository(self.engine)

    def runs(self, namespace: str) -> int:
        return self.metrics().count(namespace=namespace)

    def knowledge(self, namespace: str) -> KnowledgeBase:
        return KnowledgeBase(self.engine, namespace)

    def analyzer(self, namespace: str) -> str:
        return self.knowledge(namespace).settings().analyzer.name

    def sources(self, namespace: str) -> list[str]:
        return [document.source for document in self.knowledge(namespace).list()]


@dataclass(frozen=True)
class Case:
    """``args`` run with each namespace chosen; ``observe`` reads what the command showed or
    did; ``expect`` is that observation when ``target`` (``x`` or ``y``) was chosen."""

    args: Callable[[World], list[str]]
    prepare: Callable[[World], None]
    observe: Callable[[World, Result], Any]
    expect: Callable[[World, str], Any]
    redis: bool = False


HOUR_AGO = datetime.now(UTC) - timedelta(hours=1)


def record_runs(world: World) -> None:
    """x: two runs including lesson ops.x; y: one run including ops.y."""
    world.metrics().record_many(
        [
            make_metric(HOUR_AGO, namespace=world.x, trace=RunTrace(lessons_included=("ops.x",))),
            make_metric(HOUR_AGO, namespace=world.x, trace=RunTrace(lessons_included=("ops.x",))),
            make_metric(HOUR_AGO, namespace=world.y, trace=RunTrace(lessons_included=("ops.y",))),
        ]
    )


def add_documents(world: World) -> None:
    """x: shared.md and x-only.md; y: its own shared.md."""
    world.knowledge(world.x).add("Failover notes of the first team.", "shared.md")
    world.knowledge(world.x).add("Key rotation of the first team.", "x-only.md")
    world.knowledge(world.y).add("Failover notes of the second team.", "shared.md")


def nothing(world: World) -> None:
    return None


def data(result: Result) -> Any:
    return json.loads(result.stdout)


def both(world: World, read: Callable[[str], Any]) -> tuple[Any, Any]:
    return read(world.x), read(world.y)


def per_target(world: World, target: str, x: Any, y: Any) -> Any:
    return x if target == world.x else y


def cache_put(world: World) -> None:
    client = redis.Redis.from_url(world.redis_url or "")
    for key in ("a", "b"):
        RedisContextCache(client, namespace=world.x).put(key, key)
    RedisContextCache(client, namespace=world.y).put("c", "c")
    client.close()


def cache_size(world: World, namespace: str) -> int:
    client = redis.Redis.from_url(world.redis_url or "")
    try:
        return int(RedisContextCache(client, namespace=namespace).stats()["size"])
    finally:
        client.close()


def record_windows(world: World) -> None:
    client = redis.Redis.from_url(world.redis_url or "")
    for namespace, count in ((world.x, 2), (world.y, 1)):
        for _ in range(count):
            RedisWindows(client, namespace=namespace).record(Sample(10.0, 100, 1, True))
    client.close()


def add_keys(world: World) -> None:
    add_key(world.key_file, world.x, "agent", label="for x")
    add_key(world.key_file, world.y, "admin", label="for y")


def write_import(world: World) -> str:
    path = world.key_file.with_name("docs.jsonl")
    path.write_text(json.dumps({"source": "imported.md", "text": "Imported text."}) + "\n")
    return str(path)


CASES: dict[str, Case] = {
    "metrics report": Case(
        lambda w: ["metrics", "report", "--json"],
        record_runs,
        lambda w, r: (data(r)["namespace"], data(r)["runs"]),
        lambda w, t: (t, per_target(w, t, 2, 1)),
    ),
    "metrics prune": Case(
        lambda w: ["metrics", "prune", "--older-than", "1m", "--json"],
        record_runs,
        lambda w, r: (data(r)["namespace"], data(r)["deleted"], both(w, w.runs)),
        lambda w, t: (t, *per_target(w, t, (2, (0, 1)), (1, (2, 0)))),
    ),
    "lessons stats": Case(
        lambda w: ["lessons", "stats", "--json"],
        record_runs,
        lambda w, r: (
            data(r)["runs"],
            [(u["entity_id"], u["runs_included"]) for u in data(r)["lessons"]],
        ),
        lambda w, t: per_target(w, t, (2, [("ops.x", 2)]), (1, [("ops.y", 1)])),
    ),
    "docs list": Case(
        lambda w: ["docs", "list", "--json"],
        add_documents,
        lambda w, r: [d["source"] for d in data(r)],
        lambda w, t: per_target(w, t, ["shared.md", "x-only.md"], ["shared.md"]),
    ),
    "docs show": Case(
        lambda w: ["docs", "show", "shared.md", "--json"],
        add_documents,
        lambda w, r: data(r)["passages"],
        lambda w, t: [f"Failover notes of the {per_target(w, t, 'first', 'second')} team."],
    ),
    "docs search": Case(
        lambda w: ["docs", "search", "failover", "--json"],
        add_documents,
        lambda w, r: [(c["source"], c["text"]) for c in data(r)],
        lambda w, t: [
            ("shared.md", f"Failover notes of the {per_target(w, t, 'first', 'second')} team.")
        ],
    ),
    "docs add": Case(
        lambda w: ["docs", "add", "new.md", "--text", "New text.", "--json"],
        add_documents,
        lambda w, r: both(w, w.sources),
        lambda w, t: per_target(
            w,
            t,
            (["new.md", "shared.md", "x-only.md"], ["shared.md"]),
            (["shared.md", "x-only.md"], ["new.md", "shared.md"]),
        ),
    ),
    "docs import": Case(
        lambda w: ["docs", "import", write_import(w), "--json"],
        add_documents,
        lambda w, r: both(w, w.sources),
        lambda w, t: per_target(
            w,
            t,
            (["imported.md", "shared.md", "x-only.md"], ["shared.md"]),
            (["shared.md", "x-only.md"], ["imported.md", "shared.md"]),
        ),
    ),
    "docs delete": Case(
        lambda w: ["docs", "delete", "shared.md"],
        add_documents,
        lambda w, r: (r.stdout, both(w, w.sources)),
        lambda w, t: (
            "deleted shared.md\n",
            per_target(w, t, (["x-only.md"], ["shared.md"]), (["shared.md", "x-only.md"], [])),
        ),
    ),
    "docs configure": Case(
        lambda w: ["docs", "configure", "--analyzer", "english", "--json"],
        add_documents,
        lambda w, r: (data(r)["reanalysed"], both(w, w.analyzer)),
        lambda w, t: (
            per_target(w, t, 2, 1),
            per_target(w, t, ("english", "simple"), ("simple", "english")),
        ),
    ),
    "docs settings": Case(
        lambda w: ["docs", "settings", "--json"],
        lambda w: w.knowledge(w.y).configure(analyzer="english"),
        lambda w, r: (data(r)["namespace"], data(r)["analyzer"]),
        lambda w, t: (t, per_target(w, t, "simple", "english")),
    ),
    "docs reembed": Case(
        lambda w: ["docs", "reembed", "--json"],
        add_documents,
        lambda w, r: data(r)["reembedded"],
        lambda w, t: per_target(w, t, 2, 1),
    ),
    "cache stats": Case(
        lambda w: ["cache", "stats", "--json"],
        cache_put,
        lambda w, r: (data(r)["namespace"], data(r)["size"]),
        lambda w, t: (t, per_target(w, t, 2, 1)),
        redis=True,
    ),
    "cache clear": Case(
        lambda w: ["cache", "clear", "--json"],
        cache_put,
        lambda w, r: (data(r)["cleared"], both(w, lambda ns: cache_size(w, ns))),
        lambda w, t: per_target(w, t, (2, (0, 1)), (1, (2, 0))),
        redis=True,
    ),
    "adaptive report": Case(
        lambda w: ["adaptive", "report", "--json"],
        record_windows,
        lambda w, r: (data(r)["namespace"], data(r)["runs"]),
        lambda w, t: (t, per_target(w, t, 2, 1)),
        redis=True,
    ),
    "keys add": Case(
        lambda w: ["keys", "add", "--role", "agent", "--file", str(w.key_file)],
        nothing,
        lambda w, r: [entry.namespace for entry in read_entries(w.key_file)],
        lambda w, t: [t],
    ),
    "keys list": Case(
        lambda w: ["keys", "list", "--json", "--file", str(w.key_file)],
        add_keys,
        lambda w, r: [(key["namespace"], key["role"], key["label"]) for key in data(r)],
        lambda w, t: [(t, *per_target(w, t, ("agent", "for x"), ("admin", "for y")))],
    ),
}
# Commands that run the engine: what they write goes to the chosen namespace (SQLite only:
# each loads the sample corpus, and the fleet starts a process).
RUNS: dict[str, Case] = {
    "run": Case(
        lambda w: ["run", "How do I fail over Postgres?", "--tag", "ops", "--json"],
        nothing,
        lambda w, r: both(w, w.runs),
        lambda w, t: per_target(w, t, (1, 0), (0, 1)),
    ),
    "demo": Case(
        lambda w: ["demo", "--details", "0"],
        nothing,
        lambda w, r: both(w, w.runs),
        lambda w, t: per_target(w, t, (QUERIES, 0), (0, QUERIES)),
    ),
    "fleet": Case(
        lambda w: ["fleet", "--workers", "1", "--queries", "1", "--json"],
        nothing,
        lambda w, r: (data(r)["runs"], both(w, w.runs)),
        lambda w, t: (1, per_target(w, t, (1, 0), (0, 1))),
    ),
}
QUERIES = len(load_demo_queries())


# Namespaced commands proven in their own test files (a server on stdin and stdout, driven
# by a real client; settings and caps read per namespace).
TESTED_ELSEWHERE = {
    "mcp": "tests/interfaces/mcp/test_stdio.py",
    "config show": "tests/interfaces/cli/test_config.py",
    "lessons proposal-limit": "tests/interfaces/cli/test_cli_proposals.py",
}


def test_every_namespaced_command_has_a_case() -> None:
    assert set(CASES) | set(RUNS) | set(TESTED_ELSEWHERE) == NAMESPACED


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


@dataclass(frozen=True)
class Round:
    world: World
    environment: dict[str, str]
    flag: str | None  # the --namespace given, if any
    target: str  # the namespace the command must use


def rounds(url: str, redis_url: str | None, tmp_path: Path) -> Iterator[Round]:
    """Three rounds, each with namespaces of its own: the variable naming x, the variable
    naming y, and the variable naming y overridden by ``--namespace x``."""
    engine = create_database_engine(url)
    try:
        for number, (variable, flag) in enumerate([("x", None), ("y", None), ("y", "x")]):
            tag = uuid.uuid4().hex[:8]
            folder = tmp_path / f"round{number}"
            folder.mkdir()
            world = World(
                engine,
                redis_url,
                folder / "keys.json",
                unique_name(f"ns-{tag}-x"),
                unique_name(f"ns-{tag}-y"),
            )
            names = {"x": world.x, "y": world.y}
            environment = {
                "COLUMNS": "80",
                "CONTEXTSTORE_DATABASE_URL": url,
                "CONTEXTSTORE_NAMESPACE": names[variable],
            }
            if redis_url:
                environment["CONTEXTSTORE_REDIS_URL"] = redis_url
            chosen = names[flag] if flag else None
            yield Round(world, environment, chosen, chosen or names[variable])
    finally:
        engine.dispose()


def check(case: Case, step: Round) -> None:
    case.prepare(step.world)
    args = case.args(step.world) + (["--namespace", step.flag] if step.flag else [])
    result = CliRunner().invoke(app, args, env=step.environment)
    assert result.exit_code == 0, result.output
    assert case.observe(step.world, result) == case.expect(step.world, step.target)


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_namespaced_command_honours_the_variable_unless_the_flag_is_given(
    command: str, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    case = CASES[command]
    redis_url = request.getfixturevalue("redis_url") if case.redis else None
    worlds = []
    try:
        for step in rounds(database_url, redis_url, tmp_path):
            worlds.append(step.world)
            check(case, step)
    finally:
        if redis_url:
            client = redis.Redis.from_url(redis_url)
            for world in worlds:
                drop_namespace(client, world.x)
                drop_namespace(client, world.y)
            client.close()


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_run_is_recorded_in_the_namespace_chosen(command: str, tmp_path: Path) -> None:
    for step in rounds(f"sqlite:///{tmp_path / 'runs.db'}", None, tmp_path):
        check(RUNS[command], step)


def test_keys_add_without_any_namespace_is_one_usage_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["keys", "add", "--role", "agent", "--file", str(tmp_path / "k.json")]
    )
    assert result.exit_code == 2
    assert result.stderr == ("error: --namespace is required (or set CONTEXTSTORE_NAMESPACE)\n")
    assert not (tmp_path / "k.json").exists()


def test_metrics_report_of_the_variable_counts_only_its_runs(database_url: str) -> None:
    """The issue's acceptance line, on both databases: CONTEXTSTORE_NAMESPACE=x
    contextstore metrics report reports only x's runs (the table, exactly)."""
    engine = create_database_engine(database_url)
    with engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM query_metrics"))
    MetricsRepository(engine).record_many(
        [make_metric(HOUR_AGO, namespace="x", response_ms=10.0 * i) for i in (1, 2, 3)]
        + [make_metric(HOUR_AGO, namespace="y", response_ms=999.0)]
    )
    engine.dispose()
    result = CliRunner().invoke(
        app,
        ["metrics", "report", "--database-url", database_url],
        env={"COLUMNS": "80", "CONTEXTSTORE_NAMESPACE": "x"},
    )
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "Query metrics · namespace 'x', all workers"
    overall = lines[lines.index("Overall") : lines.index("By complexity")]
    figures = dict(
        [cell.strip() for cell in line.strip().strip("│").split("│")][:2]
        for line in overall
        if line.startswith("│")
    )
    assert figures["runs"] == "3"
    assert figures["response time p50 (ms)"] == "20.0"
