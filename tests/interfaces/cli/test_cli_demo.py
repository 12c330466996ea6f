"""``contextstore demo``, ``run`` and ``match`` through the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextstore import connect
from contextstore.core.lessons import LessonRecord, write_jsonl
from contextstore.interfaces.cli import app
from contextstore.sample_data import demo_corpus_lines, load_demo_queries, load_lessons

runner = CliRunner()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'demo.db'}"


def invoke(*args: str) -> object:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_demo_runs_the_sample_fleet_and_persists_its_metrics(database_url: str) -> None:
    first = invoke("demo", "--database-url", database_url)
    assert first.exit_code == 0, first.output
    queries = len(load_demo_queries())
    lessons = len(load_lessons())
    documents = len(demo_corpus_lines())
    assert f"sample lessons: {lessons} in the file, {lessons} written now" in first.output
    said = " ".join(first.output.split())  # the console wraps long lines
    assert (
        f"sample documents: {documents} (the fleet's and Python's reference), {documents} written"
        " now into the knowledge base, searched with hybrid search, analyzer english,"
        " embedder wordllama"
    ) in said
    assert "[Source: " in first.output  # contexts composed from the knowledge base
    assert "[Lessons — durable guidance distilled from prior work; matched" in first.output
    assert "session token budget: 8,192 tokens" in first.output
    assert "All runs" in first.output and "Adaptive windows" in first.output
    durable = first.output[first.output.index("Durable metrics") :]
    assert f"│ {queries:>4} │" in durable

    second = invoke("demo", "--database-url", database_url)
    assert second.exit_code == 0, second.output
    assert f"sample lessons: {lessons} in the file, 0 written now" in second.output
    assert "the fleet's and Python's reference), 0 written now" in " ".join(second.output.split())
    store = connect(database_url=database_url, redis_url="")
    try:
        assert len(store.knowledge.list()) == documents
    finally:
        store.close()
    durable = second.output[second.output.index("Durable metrics") :]
    assert f"│ {2 * queries:>4} │" in durable


def test_run_prints_json_with_the_lessons_of_the_scope(database_url: str) -> None:
    assert invoke("demo", "--database-url", database_url).exit_code == 0
    result = invoke(
        "run",
        "How do I fail over the primary Postgres cluster?",
        "--tag",
        "ops",
        "--budget",
        "600",
        "--database-url",
        database_url,
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["budget"] == 600
    assert data["context_length"] <= 600
    assert data["lessons"]["matched_count"] >= data["lessons"]["included_count"] >= 1
    assert data["lesson_block"].startswith("[Lessons — durable guidance")
    assert data["prompt"] == data["lesson_block"] + "\n\n" + data["context"]


def test_match_over_a_lessons_file(tmp_path: Path) -> None:
    path = tmp_path / "lessons.jsonl"
    records = [
        LessonRecord("a.l.1", "Check the lag first.", "critical", "active", ("id:a.ops",)),
        LessonRecord("a.l.2", "Ping the owner.", "info", "active", ("tag:ops",)),
        LessonRecord("a.l.3", "Not for this scope.", "critical", "active", ("id:a.ops-agent",)),
    ]
    path.write_text("".join(write_jsonl(records)), encoding="utf-8")
    result = invoke(
        "match", "--lessons", str(path), "--entity", "a.ops.x", "--tag", "ops", "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["lessons"]["matched_count"] == 2
    assert [item["entity_id"] for item in data["lessons"]["included"]] == ["a.l.1", "a.l.2"]
    assert data["explanation"] is None
    assert data["lesson_block"] == (
        "[Lessons — durable guidance distilled from prior work; matched 2, showing 2]\n"
        "- Check the lag first. (a.l.1)\n"
        "- Ping the owner. (a.l.2)"
    )


def test_match_explain_over_a_lessons_file_explains_every_lesson_in_it(tmp_path: Path) -> None:
    path = tmp_path / "lessons.jsonl"
    records = [
        LessonRecord("a.l.3", "Not for this scope.", "critical", "active", ("id:a.ops-agent",)),
        LessonRecord("a.l.2", "Ping the owner.", "info", "active", ("tag:ops",)),
        LessonRecord("a.l.1", "Retired advice.", "critical", "retired", ("tag:ops",)),
    ]
    path.write_text("".join(write_jsonl(records)), encoding="utf-8")
    result = invoke(
        "match",
        "--lessons",
        str(path),
        "--entity",
        "a.ops.x",
        "--tag",
        "ops",
        "--explain",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [item["entity_id"] for item in data["lessons"]["included"]] == ["a.l.2"]
    # The eligible first, then the others in the file's order.
    assert [(e["entity_id"], e["rank"], e["reason"]) for e in data["explanation"]] == [
        ("a.l.2", 1, None),
        ("a.l.3", None, "no key matches"),
        ("a.l.1", None, "not active"),
    ]


def one_line_error(result: object, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_match_with_an_unreadable_lessons_file_is_one_line(tmp_path: Path) -> None:
    result = invoke("match", "--lessons", str(tmp_path / "missing.jsonl"), "--tag", "ops")
    one_line_error(result, 2, "--lessons", "missing.jsonl")


def test_match_with_a_bad_lesson_line_names_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "lessons.jsonl"
    path.write_text(
        '{"entity_id": "a.l.1", "injection_form": "x", "status": "active"}\n'
        '{"entity_id": "a.l.2", "injection_form": "x", "severity": "urgent"}\n',
        encoding="utf-8",
    )
    result = invoke("match", "--lessons", str(path), "--tag", "ops")
    one_line_error(result, 2, "line 2: severity", "urgent")


def test_run_refuses_a_zero_budget_before_touching_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    result = invoke("run", "q", "--budget", "0", "--database-url", url)
    assert result.exit_code == 2
    assert not (tmp_path / "never.db").exists()


def test_an_unusable_database_url_is_one_line(tmp_path: Path) -> None:
    result = invoke("demo", "--database-url", "mysql://nowhere/db")
    one_line_error(result, 1, "mysql")


def test_demo_without_the_embeddings_extra_says_so_and_uses_hashing(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextstore.backends.embedders as embedders
    from contextstore.errors import MissingExtraError

    installed = embedders.embedder_named

    def missing(name: str | None, **options: Any) -> object:
        if name == "wordllama":
            raise MissingExtraError("WordLlamaEmbedder", "wordllama", "embeddings")
        return installed(name, **options)

    monkeypatch.setattr(embedders, "embedder_named", missing)
    result = invoke("demo", "--database-url", database_url, "--details", "0")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (
        "searched with hybrid search, analyzer english, embedder hashing "
        "(pip install 'contextstore[embeddings]' for wordllama)"
    ) in said
    store = connect(database_url=database_url, redis_url="")
    try:
        assert store.knowledge.search("How do I fail over Postgres?", 1)  # embedded and found
    finally:
        store.close()
