"""A lesson file holding what no database can store, or what JSON cannot hold sanely, is
refused whole, naming the line and the field, on SQLite and PostgreSQL: one ``error:`` line
from the CLI, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.repository import LessonRepository
from contextstore.errors import ValidationError
from contextstore.interfaces.cli.lessons import app

GOOD = json.dumps({"entity_id": "fleet.good.1", "injection_form": "Do X.", "status": "active"})
BAD = {
    "nul": (
        json.dumps({"entity_id": "fleet.bad.1", "injection_form": "nul \x00 here"}),
        "line 2: injection_form",
    ),
    "nan": (
        '{"entity_id": "fleet.bad.1", "injection_form": "x", "evidence": {"score": NaN}}',
        "line 2: evidence",
    ),
    "surrogate": (
        '{"entity_id": "fleet.bad.1", "injection_form": "lone \\udcff"}',
        "line 2: injection_form",
    ),
    "year 1 with an offset": (
        json.dumps(
            {
                "entity_id": "fleet.bad.1",
                "injection_form": "x",
                "created_at": "0001-01-01T00:00:00+01:00",
            }
        ),
        "line 2: created_at",
    ),
    "nested 100,000 deep": (
        '{"entity_id": "fleet.bad.1", "injection_form": "x", "evidence": '
        + "[" * 100_000
        + "]" * 100_000
        + "}",
        "line 2",
    ),
    "an integer of 5,000 digits": (
        '{"entity_id": "fleet.bad.1", "injection_form": "x", "evidence": {"n": '
        + "9" * 5000
        + "}}",
        "line 2",
    ),
    "a form of 10 MB": (
        json.dumps({"entity_id": "fleet.bad.1", "injection_form": "x" * 10_000_000}),
        "line 2: injection_form",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_line_refuses_the_whole_file(database_url: str, tmp_path: Path, case: str) -> None:
    line, field = BAD[case]
    path = tmp_path / "lessons.jsonl"
    path.write_text(f"{GOOD}\n{line}\n", encoding="utf-8")
    engine = create_database_engine(database_url)
    repo = LessonRepository(engine)
    with pytest.raises(ValidationError) as raised:
        repo.import_jsonl(path.read_text(encoding="utf-8").splitlines())
    assert raised.value.field == field

    result = CliRunner().invoke(app, ["import", str(path), "--database-url", database_url])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {field}: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    assert repo.list() == [] and repo.events_count() == 0
    engine.dispose()


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "is nested too deeply to read"),
        ('{"n": ' + "9" * 5000 + "}", "is not valid JSON"),
    ],
    ids=["nested 50,000 deep", "an integer of 5,000 digits"],
)
def test_a_bad_document_line_refuses_the_whole_file(
    database_url: str, tmp_path: Path, metadata: str, says: str
) -> None:
    from contextstore.backends.sql.knowledge import KnowledgeBase
    from contextstore.interfaces.cli.docs import app as docs_app

    path = tmp_path / "docs.jsonl"
    good = json.dumps({"source": "a.md", "text": "Refunds within 30 days."})
    path.write_text(f'{good}\n{{"source": "b.md", "text": "x", "metadata": {metadata}}}\n')
    result = CliRunner().invoke(
        docs_app, ["import", str(path), "--database-url", database_url, "--namespace", "docs"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: line 2: ") and says in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    engine = create_database_engine(database_url)
    assert KnowledgeBase(engine, "docs").list() == []
    engine.dispose()
