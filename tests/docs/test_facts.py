"""The numbers, names and tables of the docs agree with the code and data they describe."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from contextstore import CharTokenCounter, ContextBudget, ContextResult
from contextstore.sample_data import load_corpus, load_demo_queries, load_lessons, sample_retriever
from tests.docs.pages import ROOT, all_pages, code, find_code, read, table, tables


def test_the_sample_counts_are_the_shipped_data() -> None:
    corpus, lessons, queries = load_corpus(), load_lessons(), load_demo_queries()
    languages = Counter(document["metadata"]["lang"] for document in corpus)
    roles = Counter(query.tags[0] for query in queries)
    assert set(roles) == {"support", "ops", "coding"}
    assert set(languages) == {"en", "ar"}
    counts = {row[0]: int(row[1]) for row in table("getting-started.md", "sample", "count")}
    assert counts == {
        "internal documents": len(corpus),
        "documents in English": languages["en"],
        "documents in Arabic": languages["ar"],
        "passages they are indexed as": len(sample_retriever()),
        "lessons": len(lessons),
        "active lessons (the others proposed, retired or superseded, to show the lifecycle)": sum(
            1 for lesson in lessons if lesson.status == "active"
        ),
        "queries": len(queries),
        "support queries": roles["support"],
        "ops queries": roles["ops"],
        "coding queries": roles["coding"],
        "queries repeating an earlier one, to show cache hits": len(queries)
        - len({query.query for query in queries}),
    }


def settings_tables() -> list[tuple[str, list[str]]]:
    """(page, row) for every row of every ``| setting | default |`` table of the site."""
    return [
        (page, row)
        for page in all_pages()
        for found in tables(read(page))
        if found[0][:2] == ["setting", "default"]
        for row in found[1:]
    ]


def test_the_site_has_settings_tables() -> None:
    pages = {page for page, _ in settings_tables()}
    assert "guides/operations.md" in pages
    # The limits and fixed values; the settings a file or a variable sets have their own
    # table, written from their definitions (tests/docs/test_settings_table.py).
    assert len(settings_tables()) >= 40


@pytest.mark.parametrize(
    ("page", "row"),
    [pytest.param(page, row, id=f"{page}:{code(row[0])}") for page, row in settings_tables()],
)
def test_every_documented_default_is_the_code_s(page: str, row: list[str]) -> None:
    name, documented = code(row[0]), ast.literal_eval(code(row[1]))
    actual = find_code(name)
    assert actual == documented and isinstance(actual, bool) == isinstance(documented, bool), (
        f"{page}: {name} is documented as {documented!r}, the code has {actual!r}"
    )


EXPORT_EXAMPLES = table(
    "guides/lessons.md", "given to `--created-at`", "written by `lessons export`"
)


def test_created_at_is_read_and_written_as_the_lessons_guide_shows(tmp_path: Path) -> None:
    from contextstore.interfaces.cli import app

    runner = CliRunner()
    url = ["--database-url", f"sqlite:///{tmp_path / 'lessons.db'}"]
    accepted = [
        (code(given), code(written)) for given, written in EXPORT_EXAMPLES if "`" in written
    ]
    refused = [code(given) for given, written in EXPORT_EXAMPLES if written.startswith("refused")]
    assert len(accepted) == 2 and len(refused) == 1
    for number, (given, _) in enumerate(accepted):
        added = runner.invoke(
            app, ["lessons", "add", f"a.b.{number}", "--form", "x", "--created-at", given, *url]
        )
        assert added.exit_code == 0, added.output
    for given in refused:
        result = runner.invoke(
            app, ["lessons", "add", "a.b.9", "--form", "x", "--created-at", given, *url]
        )
        assert result.exit_code == 2
        assert result.stderr == f"error: created_at: '{given}' has no UTC offset\n"

    exported = runner.invoke(app, ["lessons", "export", *url])
    assert exported.exit_code == 0, exported.output
    written = [json.loads(line)["created_at"] for line in exported.stdout.splitlines()]
    assert written == [expected for _, expected in accepted]

    again = tmp_path / "again.jsonl"
    again.write_text(exported.stdout, encoding="utf-8")
    reimported = runner.invoke(app, ["lessons", "import", str(again), "--json", *url])
    assert json.loads(reimported.stdout) == {"added": 0, "updated": 0, "unchanged": 2}


def test_the_benchmarks_keep_to_their_own_redis_database_and_scratch_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import runner as bench_runner
    from benchmarks import services as bench_services

    for name in (bench_services.ENV_REDIS_URL, bench_services.ENV_POSTGRES_URL):
        monkeypatch.delenv(name, raising=False)
    rows = {
        code(option): (code(variable), code(default))
        for option, variable, default in table("benchmarks.md", "option", "variable", "default")
    }
    args = bench_runner.parse_args([])
    assert rows == {
        "--redis-url": (bench_services.ENV_REDIS_URL, args.redis_url),
        "--postgres-url": (bench_services.ENV_POSTGRES_URL, args.postgres_url),
    }
    assert args.redis_url.endswith("/15")

    monkeypatch.setenv(bench_services.ENV_REDIS_URL, "redis://127.0.0.1:6379/14")
    monkeypatch.setenv(bench_services.ENV_POSTGRES_URL, "postgresql://me@db.example/admin")
    args = bench_runner.parse_args([])
    assert (args.redis_url, args.postgres_url) == (
        "redis://127.0.0.1:6379/14",
        "postgresql://me@db.example/admin",
    )
    assert bench_runner.parse_args(["--redis-url", "redis://h:1/3"]).redis_url == "redis://h:1/3"


def migration_chain() -> list[str]:
    """The revision ids of ``migrations/versions``, from the first to the head."""
    parents: dict[str | None, str] = {}
    for path in (ROOT / "migrations" / "versions").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        revision = re.search(r'^revision: str = "([^"]+)"', text, re.MULTILINE)
        down = re.search(r'^down_revision: [^=]+= (None|"([^"]+)")', text, re.MULTILINE)
        assert revision is not None and down is not None, path
        parents[down.group(2)] = revision.group(1)
    chain, current = [], None
    while current in parents:
        current = parents[current]
        chain.append(current)
    assert len(chain) == len(parents)
    return chain


def test_the_revisions_listed_are_the_migrations_in_order() -> None:
    documented = [
        code(row[0]) for row in table("guides/operations.md", "revision", "what it makes")
    ]
    assert documented == migration_chain()


def test_the_routes_listed_are_the_service_s() -> None:
    from fastapi.routing import APIRoute

    served = {
        (method, route.path)
        for router in find_code("ROUTERS")
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    } | {("GET", "/openapi.json"), ("GET", "/docs")}  # FastAPI's and reference.install's
    # Served beside the API by the same server (contextstore.interfaces.server).
    served.add(("POST", find_code("http.PATH")))
    documented = set()
    for row in table("guides/service.md", "route", "role", "what"):
        spans = re.findall(r"`([^`]+)`", row[0])
        methods, _, path = spans[0].rpartition(" ")
        for method in methods.split(", "):
            documented.add((method, path))
            # `/retire`, `/supersede` after `POST /v1/lessons/{id}/activate`: siblings.
            documented |= {(method, path.rsplit("/", 1)[0] + sibling) for sibling in spans[1:]}

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    assert {(m, shape(p)) for m, p in documented} == {(m, shape(p)) for m, p in served}


def test_the_result_fields_listed_are_context_result_s() -> None:
    fields = [field.name for field in dataclasses.fields(ContextResult)]
    for page in ("getting-started.md", "design/pipeline.md"):
        paragraph = read(page).split("`ContextResult` has the fields ", 1)[1].split(".", 1)[0]
        assert re.findall(r"`([a-z_]+)`", paragraph) == fields, page


def test_the_lifecycle_table_is_the_code_s() -> None:
    documented = {
        code(status): tuple(re.findall(r"`(\w+)`", becomes))
        for status, becomes in table("design/storage.md", "status", "may become")
    }
    assert documented == {
        status: tuple(after) for status, after in find_code("TRANSITIONS").items()
    }


def test_the_redis_key_table_is_the_keys_the_code_builds() -> None:
    keys = find_code("NamespaceKeys").of("ns")
    documented = {
        code(row[0]) for row in table("design/cache-and-windows.md", "key", "type", "holds")
    }
    assert documented == {
        keys.cache_entry("<key>"),
        keys.cache_lru,
        keys.cache_ttl,
        keys.cache_stats,
        keys.windows,
    }
    assert find_code("ENTRY_MAGIC") == "cs1:"


def f32_share(available: int, share: float) -> int:
    return int(np.float32(available) * np.float32(share))


def test_the_slot_shares_are_the_budget_s() -> None:
    rows = table("design/budget.md", "mode", "summaries")
    slots = ("summaries", "semantic_recall", "cross_session", "code_context", "graph_facts")
    available = 10_000
    budget = ContextBudget(available, 0.0)
    for mode, *shares in rows:
        allocation = budget.allocate_with_opts(
            "", "", CharTokenCounter(), graph_enabled="graph" in mode, memory_first="memory" in mode
        )
        got = [getattr(allocation, slot) for slot in (*slots, "recent_history")]
        assert got == [f32_share(available, float(share)) for share in shares], mode
    assert len(rows) == 4


def test_the_intent_signals_are_the_analyzer_s() -> None:
    documented = [
        (intent, {s.strip() for s in f"{english}, {arabic.replace('،', ',')}".split(",")})
        for intent, english, arabic in table("design/analysis.md", "intent", "English signals")
    ]
    assert documented == [(name, set(signals)) for name, signals in find_code("INTENT_SIGNALS")]


def test_every_environment_variable_documented_is_read_by_the_code() -> None:
    documented = {
        code(row[0])
        for page in all_pages()
        for found in tables(read(page))
        if found[0][0] == "variable"
        for row in found[1:]
    }
    assert len(documented) >= 7
    source = "\n".join(
        path.read_text(encoding="utf-8") for path in (ROOT / "contextstore").rglob("*.py")
    )
    for variable in documented:
        assert f'"{variable}"' in source, variable
