"""Lesson records: validation naming the field, JSON Lines both ways, the in-memory source."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.core.lessons import (
    InMemoryLessons,
    LessonRecord,
    read_jsonl,
    record_from_json,
    validate_record,
    write_jsonl,
)
from contextstore.core.matching import Lesson, MatchOptions, Scope, match
from contextstore.errors import ValidationError

BORN = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def record(**changes: Any) -> LessonRecord:
    fields: dict[str, Any] = {
        "entity_id": "nw.lessons.ops.db.failover.0001",
        "injection_form": "Confirm replica lag < 5 s before promoting.",
        "severity": "critical",
        "status": "active",
        "applies_to": ("tag:ops", "id:nw.prod.ops"),
        "created_at": BORN,
    }
    fields.update(changes)
    return LessonRecord(**fields)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"entity_id": ""}, "entity_id"),
        ({"entity_id": "a..b"}, "entity_id"),
        ({"entity_id": ".a"}, "entity_id"),
        ({"entity_id": "a."}, "entity_id"),
        ({"entity_id": " a.b"}, "entity_id"),
        ({"entity_id": "a" * 256}, "entity_id"),
        ({"status": "Active"}, "status"),
        ({"severity": "urgent"}, "severity"),
        ({"injection_form": "€" * 107}, "injection_form"),
        ({"applies_to": ("foo:bar",)}, "applies_to"),
        ({"applies_to": ("tag:",)}, "applies_to"),
        ({"applies_to": ("id:",)}, "applies_to"),
        ({"applies_to": "tag:ops"}, "applies_to"),
        ({"applies_to": ("tag:ops", "tag:ops")}, "applies_to"),
        ({"status": "superseded"}, "superseded_by"),
        (
            {"status": "superseded", "superseded_by": "nw.lessons.ops.db.failover.0001"},
            "superseded_by",
        ),
        ({"superseded_by": "nw.other.0002"}, "superseded_by"),
        ({"created_at": datetime(2026, 1, 1)}, "created_at"),
        ({"updated_at": "2026-01-01T00:00:00Z"}, "updated_at"),
        ({"evidence": {"when": datetime(2026, 1, 1)}}, "evidence"),
        ({"summary": 3}, "summary"),
    ],
)
def test_a_bad_record_names_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_record(record(**changes))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_a_320_byte_form_and_a_superseded_record_are_accepted() -> None:
    validate_record(record(injection_form="€" * 106 + "xx"))
    validate_record(record(status="superseded", superseded_by="nw.lessons.ops.db.failover.0002"))


def test_to_lesson_gives_the_matcher_an_rfc3339_utc_timestamp() -> None:
    moment = datetime(2026, 3, 4, 10, 6, 7, 890123, tzinfo=timezone(timedelta(hours=5)))
    assert record(created_at=moment).to_lesson() == Lesson(
        entity_id="nw.lessons.ops.db.failover.0001",
        status="active",
        severity="critical",
        created_at="2026-03-04T05:06:07.890123+00:00",
        applies_to=("tag:ops", "id:nw.prod.ops"),
        injection_form="Confirm replica lag < 5 s before promoting.",
    )
    assert record(created_at=None).to_lesson().created_at == ""


def test_json_lines_round_trip_exactly() -> None:
    records = [
        record(evidence={"incidents": ["INC-2041"], "runs": 14}, summary="ملخص"),
        record(
            entity_id="nw.lessons.ops.db.failover.0000",
            status="superseded",
            superseded_by="nw.lessons.ops.db.failover.0001",
            updated_at=BORN + timedelta(days=1),
        ),
    ]
    lines = list(write_jsonl(records))
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert "ملخص" in lines[0]  # readable UTF-8, not \\u escapes
    assert list(read_jsonl(lines)) == records


def test_blank_lines_are_skipped() -> None:
    lines = ["\n", *write_jsonl([record()]), "   \n"]
    assert list(read_jsonl(lines)) == [record()]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("{not json", "line 2"),
        ("[1, 2]", "line 2: record"),
        ('{"injection_form": "x"}', "line 2: entity_id"),
        ('{"entity_id": "a.b", "colour": "red"}', "line 2: colour"),
        ('{"entity_id": "a.b", "applies_to": "tag:x"}', "line 2: applies_to"),
        ('{"entity_id": "a.b", "severity": "urgent"}', "line 2: severity"),
        ('{"entity_id": "a.b", "created_at": "yesterday"}', "line 2: created_at"),
        ('{"entity_id": "a.b", "created_at": "2026-01-01T00:00:00"}', "line 2: created_at"),
    ],
)
def test_a_bad_line_names_its_number_and_field(line: str, field: str) -> None:
    good = next(write_jsonl([record()]))
    with pytest.raises(ValidationError) as caught:
        list(read_jsonl([good, line]))
    assert caught.value.field == field


def test_record_from_json_fills_documented_defaults() -> None:
    parsed = record_from_json({"entity_id": "a.b", "injection_form": "x"})
    assert (parsed.status, parsed.severity, parsed.applies_to) == ("proposed", "info", ())
    assert parsed.created_at is None and parsed.evidence == {}


@given(st.lists(st.text(max_size=200), max_size=5))
def test_read_jsonl_raises_only_validation_errors(lines: list[str]) -> None:
    with contextlib.suppress(ValidationError):
        list(read_jsonl(lines))


@given(st.dictionaries(st.text(max_size=12), st.from_type(type(None)) | st.text() | st.integers()))
def test_record_from_json_raises_only_validation_errors(data: dict[str, Any]) -> None:
    with contextlib.suppress(ValidationError):
        record_from_json(data)


def test_in_memory_source_gives_active_lessons_sharing_a_key_with_the_scope() -> None:
    source = InMemoryLessons(
        [
            record(entity_id="l.ops", applies_to=("id:a.ops",)),
            record(entity_id="l.agent", applies_to=("id:a.ops-agent",)),
            record(entity_id="l.retired", applies_to=("tag:ops",), status="retired"),
            record(entity_id="l.tag", applies_to=("tag:ops",), created_at=None),
        ]
    )
    scope = Scope(entity_ids=("a.ops.x",), tags=("ops",))
    assert sorted(lesson.entity_id for lesson in source.candidates(scope)) == ["l.ops", "l.tag"]
    assert source.candidates(Scope()) == []
    # created_at left empty on add becomes now, so the lesson is dated.
    assert all(lesson.created_at for lesson in source.candidates(scope))
    assert match(source.candidates(scope), scope, MatchOptions()).matched_count == 2


def test_in_memory_source_refuses_a_bad_record_and_keeps_what_it_had() -> None:
    source = InMemoryLessons([record()])
    with pytest.raises(ValidationError):
        source.add(record(entity_id="x.y", severity="urgent"))
    assert [r.entity_id for r in source.all()] == ["nw.lessons.ops.db.failover.0001"]


def test_json_of_a_record_is_json_serialisable() -> None:
    assert json.loads(json.dumps(record().to_json()))["created_at"] == (
        "2026-03-04T05:06:07.890123+00:00"
    )
