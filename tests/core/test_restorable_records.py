"""What a backup of lessons must leave out, and the bounds on evidence, without a database."""

from __future__ import annotations

import json

import pytest

from contextstore.core.lessons import (
    MAX_EVIDENCE_DEPTH,
    LessonRecord,
    check_evidence,
    load_evidence,
    read_jsonl,
    unrestorable,
    validate_record,
)
from contextstore.errors import ValidationError


def record(entity_id: str, superseded_by: str | None = None) -> LessonRecord:
    status = "superseded" if superseded_by else "active"
    return LessonRecord(entity_id, "Do it.", status=status, superseded_by=superseded_by)


def test_unrestorable_names_cycles_dangling_references_and_what_hangs_from_them() -> None:
    records = [
        record("a", "b"),
        record("b", "c"),
        record("c"),
        record("d", "gone"),
        record("e", "d"),
        record("x", "y"),
        record("y", "x"),
        record("z", "x"),
    ]
    assert unrestorable(records) == {
        "d": "is superseded by 'gone', which is not a lesson",
        "e": "is superseded by 'd', which a backup leaves out",
        "x": "is in a supersede cycle: x -> y -> x",
        "y": "is in a supersede cycle: x -> y -> x",
        "z": "is superseded by 'x', which a backup leaves out",
    }
    assert unrestorable(records[:3]) == {}


def test_a_chain_of_100000_is_judged_in_linear_time() -> None:
    chain = [record(f"l{i}", f"l{i + 1}") for i in range(100_000)] + [record("l100000")]
    assert unrestorable(chain) == {}
    assert len(unrestorable(chain[:-1])) == 100_000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_evidence_nests_at_most_64_deep_and_holds_only_finite_numbers() -> None:
    assert MAX_EVIDENCE_DEPTH == 64
    assert load_evidence(nested(64)) == json.loads(nested(64))
    assert load_evidence('{"n": 1.7976931348623157e308, "m": 1e-400}') == {
        "n": 1.7976931348623157e308,
        "m": 0.0,
    }
    for text, reason in [
        (nested(65), "nests deeper than 64 arrays or objects"),
        (nested(100_000), "nests deeper than 64 arrays or objects"),
        ('{"n": 1e400}', "holds 1e400, a number JSON cannot carry"),
        ("[-1e400]", "holds -1e400, a number JSON cannot carry"),
        ('{"n": NaN}', "is not JSON (NaN is not JSON)"),
        ("{not json", "is not JSON"),
    ]:
        with pytest.raises(ValidationError) as refused:
            load_evidence(text)
        assert refused.value.field == "evidence"
        assert refused.value.message.startswith(reason)
    with pytest.raises(ValidationError, match="nests deeper than 64"):
        validate_record(LessonRecord("a", "x", evidence=json.loads(nested(65))))
    assert check_evidence(json.loads(nested(66)), 66) == json.loads(nested(66))


def test_an_import_line_with_evidence_too_deep_names_the_line_and_field() -> None:
    line = json.dumps({"entity_id": "a", "injection_form": "x", "evidence": json.loads(nested(65))})
    with pytest.raises(ValidationError) as refused:
        list(read_jsonl([line]))
    assert refused.value.field == "line 1: evidence"
