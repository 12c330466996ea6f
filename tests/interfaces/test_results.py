"""One result shape: the command line's JSON validates against the published schemas."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from contextstore import LessonRecord, connect
from contextstore.interfaces.cli import app
from contextstore.interfaces.result_schemas import (
    DOCUMENT_SCHEMA,
    LESSON_SCHEMA,
    MATCH_SCHEMA,
    RUN_SCHEMA,
    SEARCH_SCHEMA,
    UTC_TIMESTAMP,
)
from contextstore.interfaces.results import chunks_json, document_json, rfc3339
from contextstore.sample_data import corpus_lines

pytestmark = pytest.mark.usefixtures("clean_environment")

QUERY = "How do I fail over the primary Postgres cluster?"


def validate(data: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(data)


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = connect(database_url=url, redis_url="")
    try:
        store.lessons.add(
            LessonRecord(
                "ops.failover", "Check replica lag first.", "critical", "active", ("tag:ops",)
            )
        )
        store.lessons.add(
            LessonRecord("ops.draft", "Not reviewed yet.", "warning", "proposed", ("tag:ops",))
        )
        # run reads the knowledge base as it is: it loads no sample.
        store.knowledge.import_jsonl(corpus_lines())
    finally:
        store.close()
    return url


def test_run_json_is_the_run_shape_and_its_prompt_is_block_then_context(
    database_url: str,
) -> None:
    data = cli_json("run", QUERY, "--tag", "ops", "--database-url", database_url, "--json")
    validate(data, RUN_SCHEMA)
    assert data["lessons"] == {
        "matched_count": 1,
        "included_count": 1,
        "included": [{"entity_id": "ops.failover", "injection_form": "Check replica lag first."}],
    }
    assert data["prompt"] == f"{data['lesson_block']}\n\n{data['context']}"
    assert data["query_analysis"]["original_query"] == QUERY
    assert data["totals"]["used"] == len(data["chunks_used"]) >= 1


def test_run_json_without_lessons_sends_the_context_alone(database_url: str) -> None:
    data = cli_json("run", QUERY, "--tag", "nobody", "--database-url", database_url, "--json")
    validate(data, RUN_SCHEMA)
    assert data["lesson_block"] == ""
    assert data["prompt"] == data["context"] != ""


@pytest.mark.parametrize("explain", [False, True])
def test_match_json_is_the_match_shape(database_url: str, explain: bool) -> None:
    args = ["match", "--tag", "ops", "--database-url", database_url, "--json"]
    data = cli_json(*args, *(["--explain"] if explain else []))
    validate(data, MATCH_SCHEMA)
    assert [item["entity_id"] for item in data["lessons"]["included"]] == ["ops.failover"]
    if explain:
        assert [(e["entity_id"], e["reason"]) for e in data["explanation"]] == [
            ("ops.failover", None),
            ("ops.draft", "not active"),
        ]
    else:
        assert data["explanation"] is None


def test_the_schemas_refuse_the_old_names() -> None:
    old_match = {"matched_count": 0, "included_count": 0, "included": [], "block": ""}
    with pytest.raises(jsonschema.ValidationError):
        validate(old_match, MATCH_SCHEMA)


def test_a_document_and_search_hits_have_one_shape_and_utc_z_timestamps(tmp_path: Path) -> None:
    store = connect(database_url=f"sqlite:///{tmp_path / 'docs.db'}", redis_url="")
    try:
        document = store.knowledge.add(
            "Fail over by promoting the replica with the least lag.",
            "runbooks/failover.md",
            {"team": "ops"},
        )
        hits = store.knowledge.search("promote the replica", top_k=3)
    finally:
        store.close()
    data = document_json(document)
    validate(data, DOCUMENT_SCHEMA)
    assert data["created_at"].endswith("Z") and data["updated_at"].endswith("Z")
    assert data["passages"] == ["Fail over by promoting the replica with the least lag."]
    validate({"chunks": chunks_json(hits)}, SEARCH_SCHEMA)
    assert [hit["source"] for hit in chunks_json(hits)] == ["runbooks/failover.md"]


def test_rfc3339_is_utc_with_z() -> None:
    moment = datetime(2026, 3, 1, 14, 30, 5, 250000, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-03-01T12:30:05.250000Z"
    assert rfc3339(datetime(2026, 3, 1, 12, 0)) == "2026-03-01T12:00:00Z"
    assert rfc3339(datetime(2026, 3, 1, 12, 0, tzinfo=UTC)) == "2026-03-01T12:00:00Z"


def test_the_command_line_prints_every_timestamp_in_utc_with_z(database_url: str) -> None:
    db = ["--database-url", database_url]
    listed = cli_json("lessons", "list", "--json", *db)
    shown = cli_json("lessons", "show", "ops.failover", "--json", *db)
    cli_json("docs", "add", "notes.md", "--text", "Rotate the keys.", "--json", *db)
    document = cli_json("docs", "show", "notes.md", "--json", *db)
    stamps = [
        *(record[name] for record in listed for name in ("created_at", "updated_at")),
        shown["created_at"],
        *(event["occurred_at"] for event in shown["history"]),
        document["created_at"],
        document["updated_at"],
    ]
    assert len(stamps) == 9
    for stamp in stamps:
        assert re.fullmatch(UTC_TIMESTAMP, stamp), stamp
    validate(listed[0], LESSON_SCHEMA)
