"""The history's ``old → new`` for each changed column, shared by the CLI and the console."""

from __future__ import annotations

from contextstore.core.lesson_changes import (
    ColumnChange,
    change_value,
    column_changes,
    describe_changes,
)


def test_an_update_lists_each_column_old_to_new_in_stored_order() -> None:
    changes = {
        "severity": {"old": "info", "new": "critical"},
        "injection_form": {"old": "form one", "new": "form two"},
    }
    assert column_changes("update", changes) == (
        ColumnChange("severity", "info", "critical"),
        ColumnChange("injection_form", "form one", "form two"),
    )
    assert describe_changes("update", changes) == [
        "severity: info → critical",
        "injection_form: form one → form two",
    ]


def test_a_status_event_and_a_superseded_by_set_from_nothing() -> None:
    changes = {"status": {"old": "active", "new": "superseded"}, "superseded_by": {"new": "b.c"}}
    assert describe_changes("status", changes) == [
        "status: active → superseded",
        "superseded_by: — → b.c",
    ]


def test_scope_keys_added_and_removed() -> None:
    assert describe_changes("scope", {"added": "tag:ops"}) == ["applies_to: + tag:ops"]
    assert describe_changes("scope", {"removed": "id:nw."}) == ["applies_to: − id:nw."]
    assert describe_changes("scope", {"other": 1}) == []


def test_inserts_deletes_and_shapeless_changes_change_no_column() -> None:
    row = {"entity_id": "a.b", "status": "proposed"}
    assert column_changes("insert", row) == ()
    assert column_changes("delete", row) == ()
    assert column_changes("update", None) == ()
    assert column_changes("update", "severity") == ()


def test_values_empty_text_json_and_a_limit() -> None:
    assert change_value(None) == "—"
    assert change_value("") == '""'
    assert change_value({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert change_value(0.5) == "0.5"
    assert change_value("abcdefgh", limit=5) == "abcd…"
    assert change_value("abcde", limit=5) == "abcde"
    assert ColumnChange("detail", "x" * 10, "").describe(limit=4) == 'detail: xxx… → ""'
