"""LessonRepository: the library's way in, on SQLite and PostgreSQL (see conftest)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import MatchOptions, Scope, match
from contextstore.errors import NotFoundError, ValidationError
from tests.backends.sql.conftest import TickingClock, counts

CREATED = datetime(2025, 5, 6, 7, 8, 9, 123457, tzinfo=UTC)


def lesson(entity_id: str = "fleet.ops.db.1", **fields: Any) -> LessonRecord:
    values: dict[str, Any] = {
        "injection_form": f"Guidance {entity_id}.",
        "applies_to": ("tag:ops", "id:fleet.ops"),
        "status": "active",
    }
    values.update(fields)
    return LessonRecord(entity_id=entity_id, **values)


def test_add_then_get_round_trips_every_field(repo: LessonRepository) -> None:
    record = lesson(
        severity="critical",
        summary="s",
        detail="d",
        created_at=datetime(2025, 1, 1, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=2))),
        evidence={"runs": [1, 2], "note": "ünïcode"},
        applies_to=("tag:z", "tag:a", "id:fleet"),  # order is kept, not sorted
    )
    added = repo.add(record)
    got = repo.get(record.entity_id)
    assert got == added
    assert got.created_at == record.created_at
    assert got.created_at is not None and got.created_at.tzinfo is not None
    assert got.created_at.utcoffset() == timedelta(0)
    assert got.created_at.microsecond == 1
    assert got.applies_to == ("tag:z", "tag:a", "id:fleet")
    assert got.updated_at == got.created_at


def test_add_defaults_created_at_to_the_clock(repo: LessonRepository, clock: TickingClock) -> None:
    added = repo.add(lesson())
    assert added.created_at == clock.now
    assert repo.get(added.entity_id).created_at == clock.now


def test_add_refuses_an_existing_entity_id(repo: LessonRepository, engine: sa.Engine) -> None:
    repo.add(lesson())
    before = counts(engine)
    with pytest.raises(ValidationError) as raised:
        repo.add(lesson(injection_form="another"))
    assert raised.value.field == "entity_id"
    assert counts(engine) == before


BAD_RECORDS = [
    ("severity", lesson(severity="urgent")),
    ("status", lesson(status="archived")),
    ("applies_to", lesson(applies_to=("foo:bar",))),
    ("applies_to", lesson(applies_to=("tag:",))),
    ("applies_to", lesson(applies_to=("tag:x", "tag:x"))),
    ("entity_id", lesson("a..b")),
    ("entity_id", lesson(".a")),
    ("entity_id", lesson("")),
    ("injection_form", lesson(injection_form="€" * 107)),
    ("superseded_by", lesson(status="superseded")),
    ("superseded_by", lesson(status="superseded", superseded_by="no.such.lesson")),
    ("superseded_by", lesson(superseded_by="fleet.ops.db.0")),
    ("created_at", lesson(created_at=datetime(2025, 1, 1))),
]


@pytest.mark.parametrize(("field", "record"), BAD_RECORDS, ids=[f for f, _ in BAD_RECORDS])
def test_add_refuses_bad_records_naming_the_field(
    repo: LessonRepository, engine: sa.Engine, field: str, record: LessonRecord
) -> None:
    repo.add(lesson("fleet.ops.db.0"))
    before = counts(engine)
    with pytest.raises(ValidationError) as raised:
        repo.add(record)
    assert raised.value.field == field
    assert counts(engine) == before


BAD_UPDATES: list[tuple[str, dict[str, Any]]] = [
    ("severity", {"severity": "urgent"}),
    ("applies_to", {"applies_to": ["foo:bar"]}),
    ("applies_to", {"applies_to": "tag:x"}),
    ("injection_form", {"injection_form": "€" * 107}),
    ("evidence", {"evidence": {"x": object()}}),
]


@pytest.mark.parametrize(("field", "changes"), BAD_UPDATES, ids=[f for f, _ in BAD_UPDATES])
def test_update_refuses_bad_values_and_writes_nothing(
    repo: LessonRepository, engine: sa.Engine, field: str, changes: dict[str, Any]
) -> None:
    original = repo.add(lesson())
    before = counts(engine)
    with pytest.raises(ValidationError) as raised:
        repo.update(original.entity_id, **changes)
    assert raised.value.field == field
    assert counts(engine) == before
    assert repo.get(original.entity_id) == original


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.get("no.such"),
        lambda r: r.update("no.such", summary="x"),
        lambda r: r.activate("no.such"),
        lambda r: r.retire("no.such"),
        lambda r: r.delete("no.such"),
        lambda r: r.supersede("no.such", "fleet.ops.db.1"),
        lambda r: r.supersede("fleet.ops.db.1", "no.such"),
    ],
    ids=["get", "update", "activate", "retire", "delete", "supersede-old", "supersede-new"],
)
def test_unknown_lessons_raise_not_found_and_write_nothing(
    repo: LessonRepository, engine: sa.Engine, call: Any
) -> None:
    repo.add(lesson())
    before = counts(engine)
    with pytest.raises(NotFoundError, match=r"no\.such"):
        call(repo)
    assert counts(engine) == before


def test_a_malformed_id_argument_is_a_validation_error(repo: LessonRepository) -> None:
    with pytest.raises(ValidationError) as raised:
        repo.activate("a..b")
    assert raised.value.field == "entity_id"


def test_update_changes_content_bumps_updated_at_and_keeps_created_at(
    repo: LessonRepository,
) -> None:
    added = repo.add(lesson(created_at=CREATED))
    updated = repo.update(
        added.entity_id,
        summary="new summary",
        detail="new detail",
        injection_form="New form.",
        severity="warning",
        applies_to=["tag:db"],
        evidence={"k": 1},
    )
    assert repo.get(added.entity_id) == updated
    assert updated.created_at == CREATED
    assert updated.updated_at is not None and added.updated_at is not None
    assert updated.updated_at > added.updated_at
    assert (updated.summary, updated.detail, updated.injection_form) == (
        "new summary",
        "new detail",
        "New form.",
    )
    assert (updated.severity, updated.applies_to, updated.evidence) == (
        "warning",
        ("tag:db",),
        {"k": 1},
    )
    assert updated.status == added.status
    # Even an update that changes nothing else moves updated_at.
    again = repo.update(added.entity_id)
    assert again.updated_at is not None and again.updated_at > updated.updated_at


def test_status_changes_and_their_audit_rows(repo: LessonRepository) -> None:
    repo.add(lesson(status="proposed"))
    assert repo.activate("fleet.ops.db.1").status == "active"
    assert repo.retire("fleet.ops.db.1").status == "retired"
    unchanged = repo.get("fleet.ops.db.1")
    assert repo.retire("fleet.ops.db.1") == unchanged  # already retired: nothing written
    history = [(e.event, e.old_status, e.new_status) for e in repo.history("fleet.ops.db.1")]
    assert history == [
        ("insert", None, "proposed"),
        ("scope", None, None),
        ("scope", None, None),
        ("status", "proposed", "active"),
        ("status", "active", "retired"),
    ]
    events = repo.history()
    assert all(e.occurred_at.tzinfo is not None for e in events)
    assert {e.actor for e in events} == {repo.actor}
    assert [e.changes for e in events[1:3]] == [{"added": "tag:ops"}, {"added": "id:fleet.ops"}]
    assert events[3].changes["status"] == {"old": "proposed", "new": "active"}
    assert set(events[3].changes) == {"status"}  # updated_at is not listed as a change


def test_supersede_activates_a_proposed_replacement(repo: LessonRepository) -> None:
    repo.add(lesson("fleet.ops.db.1"))
    repo.add(lesson("fleet.ops.db.2", status="proposed"))
    old = repo.supersede("fleet.ops.db.1", "fleet.ops.db.2")
    assert (old.status, old.superseded_by) == ("superseded", "fleet.ops.db.2")
    assert repo.get("fleet.ops.db.1") == old
    assert repo.get("fleet.ops.db.2").status == "active"
    # Superseded is final: the old lesson cannot come back next to its replacement.
    for change in (repo.activate, repo.retire):
        with pytest.raises(ValidationError) as raised:
            change("fleet.ops.db.1")
        assert raised.value.field == "status"
    assert repo.get("fleet.ops.db.1") == old


@pytest.mark.parametrize("status", ["retired", "superseded"])
def test_supersede_refuses_a_retired_or_superseded_replacement(
    repo: LessonRepository, engine: sa.Engine, status: str
) -> None:
    repo.add(lesson("fleet.ops.db.1"))
    repo.add(lesson("fleet.ops.db.3"))
    extra = {"superseded_by": "fleet.ops.db.3"} if status == "superseded" else {}
    repo.add(lesson("fleet.ops.db.2", status=status, **extra))
    before = counts(engine)
    with pytest.raises(ValidationError) as raised:
        repo.supersede("fleet.ops.db.1", "fleet.ops.db.2")
    assert raised.value.field == "superseded_by"
    with pytest.raises(ValidationError):
        repo.supersede("fleet.ops.db.1", "fleet.ops.db.1")
    assert counts(engine) == before


def test_delete_removes_lesson_and_keys_and_keeps_history(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.add(lesson())
    repo.delete("fleet.ops.db.1")
    with pytest.raises(NotFoundError):
        repo.get("fleet.ops.db.1")
    # insert, its two keys, then one delete: the keys leave with the lesson, unlisted.
    assert counts(engine) == (0, 0, 4)
    assert [e.event for e in repo.history("fleet.ops.db.1")] == [
        "insert",
        "scope",
        "scope",
        "delete",
    ]


def test_delete_refuses_a_lesson_others_are_superseded_by(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.add(lesson("fleet.ops.db.1"))
    repo.add(lesson("fleet.ops.db.2"))
    repo.supersede("fleet.ops.db.1", "fleet.ops.db.2")
    before = counts(engine)
    with pytest.raises(ValidationError, match=r"fleet\.ops\.db\.1"):
        repo.delete("fleet.ops.db.2")
    assert counts(engine) == before


def test_list_filters(repo: LessonRepository) -> None:
    repo.add(lesson("b.1", severity="critical", applies_to=("tag:ops",)))
    repo.add(lesson("a.1", severity="info", applies_to=("tag:ops", "id:a")))
    repo.add(lesson("c.1", status="proposed", applies_to=("tag:db",)))

    def ids(**filters: Any) -> list[str]:
        return [r.entity_id for r in repo.list(**filters)]

    assert ids() == ["a.1", "b.1", "c.1"]
    assert ids(status="active") == ["a.1", "b.1"]
    assert ids(severity="critical") == ["b.1"]
    # Status and severity in any case, as on the command line and over HTTP.
    assert ids(status="ACTIVE", severity="Critical") == ["b.1"]
    with pytest.raises(ValidationError) as unknown:
        repo.list(status="actve")
    assert unknown.value.message == "'actve' is not one of proposed, active, retired, superseded"
    assert ids(tag="ops") == ["a.1", "b.1"]
    assert ids(key="id:a") == ["a.1"]
    assert ids(tag="ops", key="id:a") == ["a.1"]
    assert ids(status="proposed", tag="db") == ["c.1"]
    assert ids(limit=2) == ["a.1", "b.1"]
    assert ids(limit=0) == []
    refusals: list[tuple[str, dict[str, Any]]] = [
        ("status", {"status": "bogus"}),
        ("severity", {"severity": "urgent"}),
        ("applies_to", {"key": "foo:bar"}),
        ("limit", {"limit": -1}),
    ]
    for field, filters in refusals:
        with pytest.raises(ValidationError) as raised:
            repo.list(**filters)
        assert raised.value.field == field


def test_list_searches_ids_and_text_ignoring_case(repo: LessonRepository) -> None:
    repo.add(lesson("billing.retry", summary="Back off on HTTP 429"))
    repo.add(lesson("search.cache", detail="Use 100% of the_cache", status="retired"))
    repo.add(lesson("ops.db", injection_form="Check the Billing replica."))

    def ids(**filters: Any) -> list[str]:
        return [r.entity_id for r in repo.list(**filters)]

    assert ids(search="BILLING") == ["billing.retry", "ops.db"]
    assert ids(search="http 429") == ["billing.retry"]
    assert ids(search="100%") == ["search.cache"]
    assert ids(search="0%") == ["search.cache"]
    assert ids(search="the_c") == ["search.cache"]
    assert ids(search="the%c") == []  # % is a character, not a wildcard
    assert ids(search="th_") == []  # and so is _
    assert ids(search="billing", status="active") == ["billing.retry", "ops.db"]
    assert ids(search="cache", status="active") == []
    assert ids(search="") == ids() == ["billing.retry", "ops.db", "search.cache"]
    for bad in ("a\x00b", "x" * 201):
        with pytest.raises(ValidationError) as raised:
            repo.list(search=bad)
        assert raised.value.field == "search"


def test_list_orders_by_code_point(repo: LessonRepository) -> None:
    for entity_id in ["b", "B", "a", "_x", "Z", "é"]:
        repo.add(lesson(entity_id))
    assert [r.entity_id for r in repo.list()] == sorted(["b", "B", "a", "_x", "Z", "é"])


def corpus() -> list[LessonRecord]:
    base = datetime(2025, 3, 1, tzinfo=UTC)
    records = [
        lesson(
            f"fleet.{team}.{n}",
            severity=("critical", "warning", "info")[n % 3],
            applies_to=(f"tag:{team}", f"id:fleet.{team}") if n % 2 else (f"tag:{team}",),
            created_at=base + timedelta(hours=n, microseconds=n),
            evidence={"n": n},
            summary=f"summary {n}",
        )
        for team in ("ops", "db", "web")
        for n in range(6)
    ]
    records.append(lesson("fleet.ops.same", created_at=base, severity="critical"))
    records.append(lesson("fleet.ops.old", status="superseded", superseded_by="fleet.ops.same"))
    records.append(lesson("fleet.ops.off", status="retired"))
    return records


def test_export_wipe_import_reproduces_match_output(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    # One batch where the superseded lesson comes before its replacement.
    repo.import_records(list(reversed(corpus())))
    scopes = [
        Scope(tags=("ops",)),
        Scope(entity_ids=("fleet.db.x",), tags=("web",)),
        Scope(entity_ids=("fleet.ops.y.z",)),
    ]
    opts = MatchOptions(k=25, byte_budget=100_000)
    before = [match(repo.candidates(scope), scope, opts) for scope in scopes]
    exported = list(repo.export_jsonl())
    records = repo.export_records()

    with engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM lessons"))
    assert repo.list() == []

    summary = repo.import_jsonl(exported)
    assert (summary.added, summary.updated, summary.unchanged) == (len(records), 0, 0)
    assert repo.export_records() == records
    assert list(repo.export_jsonl()) == exported
    after = [match(repo.candidates(scope), scope, opts) for scope in scopes]
    assert after == before
    assert all(result.included_count > 0 for result in after)


def test_importing_the_same_file_twice_changes_nothing(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.import_records(corpus())
    exported = list(repo.export_jsonl())
    before, stored = counts(engine), repo.export_records()
    summary = repo.import_jsonl(exported)
    assert (summary.added, summary.updated, summary.unchanged) == (0, 0, len(stored))
    assert counts(engine) == before
    assert repo.export_records() == stored  # updated_at included


def test_import_updates_changed_records_and_keeps_created_at(repo: LessonRepository) -> None:
    original = repo.add(lesson(created_at=CREATED))
    changed = replace(original, injection_form="Changed.", status="retired", updated_at=None)
    summary = repo.import_records([changed])
    assert (summary.added, summary.updated, summary.unchanged) == (0, 1, 0)
    stored = repo.get(original.entity_id)
    assert (stored.injection_form, stored.status, stored.created_at) == (
        "Changed.",
        "retired",
        CREATED,
    )
    assert stored.updated_at is not None and original.updated_at is not None
    assert stored.updated_at > original.updated_at
    # created_at omitted in a file means "keep the stored one".
    assert repo.import_records([replace(stored, created_at=None)]).unchanged == 1


@pytest.mark.parametrize(
    ("field", "records"),
    [
        ("created_at", [lesson(created_at=CREATED + timedelta(seconds=1))]),
        ("entity_id", [lesson("new.1"), lesson("new.1")]),
        ("superseded_by", [lesson("new.1", status="superseded", superseded_by="missing.1")]),
        (
            "superseded_by",
            [
                lesson("new.1", status="superseded", superseded_by="new.2"),
                lesson("new.2", status="superseded", superseded_by="new.1"),
            ],
        ),
    ],
    ids=["created_at-moved", "duplicate", "dangling-reference", "cycle"],
)
def test_a_bad_import_writes_nothing(
    repo: LessonRepository, engine: sa.Engine, field: str, records: list[LessonRecord]
) -> None:
    repo.add(lesson(created_at=CREATED))
    batch = [lesson("new.0"), *records]  # a good record first: it must not survive either
    before, stored = counts(engine), repo.export_records()
    with pytest.raises(ValidationError) as raised:
        repo.import_records(batch)
    assert raised.value.field == field
    assert counts(engine) == before
    assert repo.export_records() == stored


def test_a_malformed_jsonl_line_writes_nothing(repo: LessonRepository, engine: sa.Engine) -> None:
    good = '{"entity_id": "a.b", "injection_form": "x"}'
    with pytest.raises(ValidationError) as raised:
        repo.import_jsonl([good, '{"entity_id": "a.c", "severity": "urgent"}'])
    assert raised.value.field == "line 2: severity"
    with pytest.raises(ValidationError, match="line 2"):
        repo.import_jsonl([good, "{not json"])
    assert counts(engine) == (0, 0, 0)


def test_integrity_errors_are_translated_at_the_boundary(
    sync_repo: LessonRepository, engine: sa.Engine
) -> None:
    # Validation in Python normally stops bad values first; a statement that reaches the
    # database inside the repository's transaction shows what happens when it does not.
    sync_repo.add(lesson())
    with pytest.raises(ValidationError) as raised, sync_repo._write() as session:
        session.execute(sa.text("UPDATE lessons SET severity = 'urgent'"))
    assert raised.value.field == "severity"
    assert isinstance(raised.value.__cause__, sa.exc.IntegrityError)
    assert sync_repo.get("fleet.ops.db.1").severity == "info"


def test_using_a_callers_session_commits_with_the_caller(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    with Session(engine) as session:
        joined = repo.using(session)
        joined.add(lesson("x.1"))
        with pytest.raises(ValidationError):
            joined.add(lesson("x.2", severity="urgent"))
        with pytest.raises(ValidationError):
            joined.add(lesson("x.1"))  # refused by a read inside the savepoint
        assert [r.entity_id for r in joined.list()] == ["x.1"]  # the caller sees its own write
        session.rollback()
    assert repo.list() == []
    with Session(engine) as session, session.begin():
        repo.using(session).add(lesson("x.3"))
    assert [r.entity_id for r in repo.list()] == ["x.3"]
