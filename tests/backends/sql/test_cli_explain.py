"""``contextstore match --explain`` on SQLite and PostgreSQL: every lesson of the scope is
explained, the retired, proposed and superseded ones as ``not active``, while the block holds
the active ones only."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.interfaces.cli import app

CREATED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# (entity id, status, severity, superseded_by), added in this order (the superseding lesson
# exists before the superseded one refers to it).
LESSONS = [
    ("ops.db.failover", "active", "critical", None),
    ("ops.tls", "active", "info", None),
    ("ops.dns", "proposed", "critical", None),
    ("ops.old.failover", "superseded", "critical", "ops.db.failover"),
    ("ops.cron", "retired", "warning", None),
]


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def lessons_url(database_url: str) -> str:
    engine = create_database_engine(database_url)
    repository = LessonRepository(engine)
    for index, (entity_id, status, severity, superseded_by) in enumerate(LESSONS):
        repository.add(
            LessonRecord(
                entity_id,
                f"Form of {entity_id}.",
                status=status,
                severity=severity,
                applies_to=("tag:ops",),
                superseded_by=superseded_by,
                created_at=CREATED - timedelta(hours=index),
            )
        )
    # Another scope's lesson is no candidate at all.
    repository.add(
        LessonRecord("web.cdn", "Form of web.cdn.", status="active", applies_to=("tag:web",))
    )
    engine.dispose()
    return database_url


def run(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result


def test_explain_lists_the_inactive_lessons_of_the_scope_as_not_active(lessons_url: str) -> None:
    result = run("match", "--tag", "ops", "--explain", "--database-url", lessons_url)
    # Rich pads each line to the table's width; the text itself is exact.
    assert [line.rstrip() for line in result.stdout.splitlines()] == [
        "matched 2, showing 2",
        "",
        " #  lesson            matched keys  outcome",
        " " + "─" * 49,
        " 1  ops.db.failover   tag:ops       included",
        " 2  ops.tls           tag:ops       included",
        " —  ops.cron          tag:ops       no: not active",
        " —  ops.dns           tag:ops       no: not active",
        " —  ops.old.failover  tag:ops       no: not active",
        "",
        "╭" + "─" * 32 + " lesson block " + "─" * 32 + "╮",
        "│ [Lessons — durable guidance distilled from prior work; matched 2, showing 2] │",
        "│ - Form of ops.db.failover. (ops.db.failover)" + " " * 33 + "│",
        "│ - Form of ops.tls. (ops.tls)" + " " * 49 + "│",
        "╰" + "─" * 78 + "╯",
    ]


def test_explain_json_lists_every_lesson_of_the_scope(lessons_url: str) -> None:
    data: dict[str, Any] = json.loads(
        run("match", "--tag", "ops", "--explain", "--json", "--database-url", lessons_url).stdout
    )
    explained = [
        {"entity_id": entity_id, "reason": reason, "rank": rank, "included": included}
        for entity_id, reason, rank, included in [
            ("ops.db.failover", None, 1, True),
            ("ops.tls", None, 2, True),
            ("ops.cron", "not active", None, False),
            ("ops.dns", "not active", None, False),
            ("ops.old.failover", "not active", None, False),
        ]
    ]
    assert data == {
        "lessons": {
            "matched_count": 2,
            "included_count": 2,
            "included": [
                {"entity_id": "ops.db.failover", "injection_form": "Form of ops.db.failover."},
                {"entity_id": "ops.tls", "injection_form": "Form of ops.tls."},
            ],
        },
        "lesson_block": (
            "[Lessons — durable guidance distilled from prior work; matched 2, showing 2]\n"
            "- Form of ops.db.failover. (ops.db.failover)\n"
            "- Form of ops.tls. (ops.tls)"
        ),
        "explanation": [
            {
                "entity_id": item["entity_id"],
                "matched_keys": ["tag:ops"],
                "eligible": item["reason"] is None,
                "reason": item["reason"],
                "rank": item["rank"],
                "included": item["included"],
                "excluded_by": None,
                "relevance": None,
                "form_bytes": len(f"Form of {item['entity_id']}."),
            }
            for item in explained
        ],
    }


def test_match_without_explain_shows_the_active_lessons_only(lessons_url: str) -> None:
    data = json.loads(run("match", "--tag", "ops", "--json", "--database-url", lessons_url).stdout)
    assert [item["entity_id"] for item in data["lessons"]["included"]] == [
        "ops.db.failover",
        "ops.tls",
    ]
    assert data["explanation"] is None
