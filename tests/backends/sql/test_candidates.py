"""``candidates(scope)``: exactly the lessons the matcher would accept, found through the index,
in one statement."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import (
    NOT_ACTIVE,
    Lesson,
    MatchOptions,
    Scope,
    explain,
    lookup_keys,
    match,
)

# A tiny alphabet so prefixes, tags and ids collide often; "" makes empty segments in keys and
# scope ids (which lesson entity ids may not have, but keys and scopes may).
KEY_SEGMENTS = st.sampled_from(["a", "b", "A", ""])
ID_SEGMENTS = st.sampled_from(["a", "b", "A"])
TAGS = st.sampled_from(["x", "y", "X", "x.y", ""])


def insert_raw(engine: sa.Engine, rows: list[dict[str, Any]], keys: list[dict[str, Any]]) -> None:
    """Bulk-load lessons and their scope keys in plain SQL, as an administrator would."""
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO lessons (entity_id, status, injection_form) "
                "VALUES (:entity_id, :status, :injection_form)"
            ),
            rows,
        )
        connection.execute(
            sa.text(
                "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                "VALUES (:lesson_id, :scope_key, :position)"
            ),
            keys,
        )


def dotted(segments: st.SearchStrategy[str], max_size: int = 3) -> st.SearchStrategy[str]:
    return st.lists(segments, min_size=1, max_size=max_size).map(".".join)


SCOPE_KEYS = st.one_of(
    TAGS.filter(bool).map(lambda tag: f"tag:{tag}"),
    dotted(KEY_SEGMENTS).filter(bool).map(lambda prefix: f"id:{prefix}"),
)
SCOPES = st.builds(
    Scope,
    entity_ids=st.lists(dotted(KEY_SEGMENTS, 4), max_size=3).map(tuple),
    tags=st.lists(TAGS, max_size=3).map(tuple),
)


@st.composite
def lesson_sets(draw: st.DrawFn) -> list[LessonRecord]:
    ids = draw(st.lists(dotted(ID_SEGMENTS), max_size=10, unique=True))
    records = []
    for index, entity_id in enumerate(ids):
        status = draw(st.sampled_from(["proposed", "active", "active", "retired", "superseded"]))
        others = ids[:index]  # only earlier lessons: no supersede cycles
        superseded_by = None
        if status == "superseded":
            if others:
                superseded_by = draw(st.sampled_from(others))
            else:
                status = "retired"
        records.append(
            LessonRecord(
                entity_id=entity_id,
                injection_form=f"form {entity_id}",
                status=status,
                severity=draw(st.sampled_from(["critical", "warning", "info"])),
                applies_to=tuple(draw(st.lists(SCOPE_KEYS, max_size=3, unique=True))),
                superseded_by=superseded_by,
            )
        )
    return records


def wipe(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM lessons"))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(records=lesson_sets(), scopes=st.lists(SCOPES, min_size=1, max_size=4))
def test_candidates_equal_what_the_matcher_accepts_from_a_full_scan(
    repo: LessonRepository, engine: sa.Engine, records: list[LessonRecord], scopes: list[Scope]
) -> None:
    wipe(engine)
    repo.import_records(records)
    everything = [record.to_lesson() for record in repo.list()]  # entity_id order
    for scope in scopes:
        assert repo.candidates(scope) == [
            as_candidate(lesson, scope)
            for lesson in everything
            if match([lesson], scope).matched_count == 1
        ]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(records=lesson_sets(), scopes=st.lists(SCOPES, min_size=1, max_size=4))
def test_candidates_of_every_status_are_the_lessons_sharing_a_key_and_match_the_same(
    repo: LessonRepository, engine: sa.Engine, records: list[LessonRecord], scopes: list[Scope]
) -> None:
    """``include_inactive``: every lesson with a key the scope can match, its own status kept;
    ``match`` and ``explain`` over them agree with ``match`` over the active ones alone."""
    wipe(engine)
    repo.import_records(records)
    everything = [record.to_lesson() for record in repo.list()]  # entity_id order
    for scope in scopes:
        found = repo.candidates(scope, include_inactive=True)
        assert found == [
            as_candidate(lesson, scope)
            for lesson in everything
            if not lookup_keys(scope).isdisjoint(lesson.applies_to)
        ]
        active = repo.candidates(scope)
        assert match(found, scope) == match(active, scope)
        explained = explain(found, scope)
        assert [item.entity_id for item in explained if item.eligible] == [
            item.entity_id for item in explain(active, scope)
        ]
        assert {item.entity_id for item in explained if item.reason == NOT_ACTIVE} == {
            lesson.entity_id for lesson in found if lesson.status != "active"
        }
        # The relevance order does not depend on the order the database returned them in.
        relevance = MatchOptions(order="relevance")
        query = "form a b"
        shuffled = random.Random(len(found)).sample(found, len(found))
        assert match(shuffled, scope, relevance, query) == match(found, scope, relevance, query)
        assert [e for e in explain(shuffled, scope, relevance, query) if e.eligible] == [
            e for e in explain(found, scope, relevance, query) if e.eligible
        ]


def as_candidate(lesson: Lesson, scope: Scope) -> Lesson:
    """``lesson`` as ``candidates(scope)`` returns it: only its keys the scope can match."""
    return replace(lesson, applies_to=tuple(sorted(lookup_keys(scope) & set(lesson.applies_to))))


def test_an_empty_scope_has_no_candidates_and_sends_no_query(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.add(LessonRecord("a.b", "x", status="active", applies_to=("tag:x",)))
    with captured(engine) as statements:
        assert repo.candidates(Scope()) == []
        assert repo.candidates(Scope(entity_ids=("",), tags=("",))) == []
    assert statements == []


class captured:
    """Collects the (statement, parameters) pairs an engine sends while active: through
    ``Connection.execute`` (its events) and on the driver connection (``DirectStatement``,
    whose parameters are taken as it hands them to the driver)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] = []
        self._patch = pytest.MonkeyPatch()

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        self.statements.append((statement, parameters))

    def __enter__(self) -> list[tuple[str, Any]]:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        convert = DirectStatement.parameters
        statements = self.statements

        def parameters(statement: DirectStatement, values: Any) -> Any:
            sent = convert(statement, values)
            statements.append((statement.sql, sent))
            return sent

        self._patch.setattr(DirectStatement, "parameters", parameters)
        return self.statements

    def __exit__(self, *_: object) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)
        self._patch.undo()


@pytest.fixture(params=["analyzed", "never analyzed"])
def fleet(engine: sa.Engine, request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    """5,000 lessons, 90% active, each tag shared by ten of them; planner statistics gathered
    or not (contextstore never runs ANALYZE; on SQLite nothing else does either)."""
    rows = [
        {
            "entity_id": f"fleet.team{i % 40}.agent{i}",
            "status": "retired" if i % 10 == 9 else "active",
            "injection_form": "x",
        }
        for i in range(5000)
    ]
    keys = [
        {"lesson_id": row["entity_id"], "scope_key": key, "position": position}
        for i, row in enumerate(rows)
        for position, key in enumerate([f"tag:t{i % 500}", f"id:fleet.team{i % 40}.agent{i}"])
    ]
    insert_raw(engine, rows, keys)
    if request.param == "analyzed":
        with engine.connect() as connection:
            connection.execute(sa.text("ANALYZE"))
            connection.commit()
    yield engine


def plan_of(engine: sa.Engine, statement: str, parameters: Any) -> list[str]:
    """The plan of ``statement`` as sent with ``parameters``, one string per line."""
    prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as connection:
        rows = connection.exec_driver_sql(prefix + statement, parameters).all()
    return [" ".join(str(cell) for cell in row) for row in rows]


def explain_generic(engine: sa.Engine, statement: str, parameters: Any) -> list[str]:
    """PostgreSQL's generic plan of ``statement``: the plan a prepared statement may settle
    on (psycopg prepares a statement a connection runs often), made for any parameter."""
    # EXECUTE takes no bound parameters: the keys are written as a literal.
    keys = ", ".join("'" + key.replace("'", "''") + "'" for key in parameters["keys"])
    with engine.connect() as connection:
        connection.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        connection.exec_driver_sql(
            "PREPARE candidates(text[]) AS " + statement.replace("%(keys)s", "$1")
        )
        rows = connection.exec_driver_sql(f"EXPLAIN EXECUTE candidates(ARRAY[{keys}])")
        plan = [str(row[0]) for row in rows]
        connection.exec_driver_sql("DEALLOCATE candidates")
    return plan


def test_candidates_use_the_scope_key_index_not_a_scan(
    fleet: sa.Engine, sync_repo: LessonRepository, request: pytest.FixtureRequest
) -> None:
    """EXPLAIN the very statement the repository sends, with the planner left free."""
    # Tag t7 is shared by agents 7, 507, …, 4507 (all active), t9 by agents 9, 509, …, 4509
    # (all retired).
    scope = Scope(entity_ids=("fleet.team3.agent43",), tags=("t7", "t9"))
    with captured(fleet) as statements:
        found = sync_repo.candidates(scope)
        every_status = sync_repo.candidates(scope, include_inactive=True)
    tagged = {
        tag: {f"fleet.team{i % 40}.agent{i}" for i in range(tag, 5000, 500)} for tag in (7, 9)
    }
    assert [lesson.entity_id for lesson in found] == sorted({"fleet.team3.agent43"} | tagged[7])
    assert [(lesson.entity_id, lesson.status) for lesson in every_status] == sorted(
        [(entity_id, "active") for entity_id in {"fleet.team3.agent43"} | tagged[7]]
        + [(entity_id, "retired") for entity_id in tagged[9]]
    )
    selects = [(sql, params) for sql, params in statements if sql.startswith("SELECT")]
    assert len(selects) == 2  # one statement each, with or without inactive lessons
    for select in selects:
        assert_keyed(fleet.dialect.name, plan_of(fleet, *select))
        # A generic plan estimates ANY($1) blind; with statistics it must still start from
        # the keys (without, on a table this small, a scan of lesson_scopes is fair: it is
        # never used anyway, as each read's ROLLBACK keeps psycopg from preparing it).
        analyzed = request.node.callspec.params["fleet"] == "analyzed"
        if fleet.dialect.name == "postgresql" and analyzed:
            assert_keyed(fleet.dialect.name, explain_generic(fleet, *select))


def assert_keyed(dialect: str, plan: list[str]) -> None:
    """``plan`` reads the scope-key index first, then each lesson by primary key; no scans."""
    text = "\n".join(plan)
    if dialect == "sqlite":
        # "SEARCH k USING COVERING INDEX ix_lesson_scopes_scope_key (scope_key=?)", then
        # "SEARCH l USING INDEX sqlite_autoindex_lessons_1 (entity_id=?)".
        by_key = line_of(plan, "SEARCH", "ix_lesson_scopes_scope_key (scope_key=?)")
        by_id = line_of(plan, "SEARCH", "sqlite_autoindex_lessons_1 (entity_id=?)")
        scans = [line for line in plan if " SCAN " in f" {line}" and "json_each" not in line]
        assert scans == [], text  # neither table is scanned; only the list of keys is walked
    else:
        # An index (only) scan or a bitmap index scan of the key index, then each lesson by
        # its primary key.
        by_key = line_of(plan, "Scan", "ix_lesson_scopes_scope_key")
        by_id = line_of(plan, "Index Scan using pk_lessons on lessons")
        assert "Seq Scan" not in text, text
    assert by_key < by_id, text  # the scope-key index drives the join, lessons come by key
    assert "ix_lessons_status" not in text, text


def line_of(plan: list[str], *needles: str) -> int:
    """The index of the one plan line containing every one of ``needles``."""
    found = [i for i, line in enumerate(plan) if all(needle in line for needle in needles)]
    assert len(found) == 1, (needles, "\n".join(plan))
    return found[0]


def test_candidates_send_one_statement_however_many_lessons_match(
    engine: sa.Engine, sync_repo: LessonRepository
) -> None:
    """1,200 lessons share ``tag:wide``: still one SELECT (the old code batched by 500)."""
    rows = [
        {
            "entity_id": f"wide.l{i:04d}",
            "status": "retired" if i % 4 == 0 else "active",
            "injection_form": f"form {i}",
        }
        for i in range(1200)
    ]
    keys = [
        {"lesson_id": row["entity_id"], "scope_key": key, "position": position}
        for row in rows
        for position, key in enumerate(["tag:wide", f"id:{row['entity_id']}"])
    ]
    insert_raw(engine, rows, keys)
    scope = Scope(entity_ids=("wide.l0007",), tags=("wide",))
    with captured(engine) as statements:
        found = sync_repo.candidates(scope)
    active = [row["entity_id"] for row in rows if row["status"] == "active"]
    assert [lesson.entity_id for lesson in found] == active  # 900, each once
    assert found[active.index("wide.l0007")].applies_to == ("id:wide.l0007", "tag:wide")
    sent = [sql for sql, _ in statements]
    # SQLite's read transaction starts with a BEGIN of its own (see database.read_only).
    assert [sql for sql in sent if sql != "BEGIN"] == [sent[-1]], sent
    assert sent[-1].startswith("SELECT") and len(sent) <= 2, sent


def test_created_at_is_what_to_lesson_gives_whatever_the_stored_form(
    engine: sa.Engine, repo: LessonRepository
) -> None:
    """Timestamps written by hand in SQL, not by ``UTCDateTime``, still read back exactly."""
    if engine.dialect.name == "sqlite":
        literals = ["2026-01-02 03:04:05", "2026-01-02 03:04:05.5", "2026-01-02T03:04:05.5+02:00"]
    else:
        literals = ["2026-01-02 03:04:05+00", "2026-01-02 03:04:05.5+02:00"]
    with engine.begin() as connection:
        for index, literal in enumerate([*literals, None]):  # None: the server default
            entity_id = f"time.l{index}"
            created = "CURRENT_TIMESTAMP" if literal is None else f"'{literal}'"
            connection.execute(
                sa.text(
                    "INSERT INTO lessons (entity_id, status, injection_form, created_at) "
                    f"VALUES (:id, 'active', 'x', {created})"
                ),
                {"id": entity_id},
            )
            connection.execute(
                sa.text(
                    "INSERT INTO lesson_scopes (lesson_id, scope_key, position) "
                    "VALUES (:id, 'tag:time', 0)"
                ),
                {"id": entity_id},
            )
    found = repo.candidates(Scope(tags=("time",)))
    assert len(found) == len(literals) + 1
    for lesson in found:
        assert lesson.created_at == repo.get(lesson.entity_id).to_lesson().created_at
        assert lesson.created_at.endswith("+00:00")


def test_candidates_inside_a_callers_session_see_its_uncommitted_writes(
    engine: sa.Engine, repo: LessonRepository
) -> None:
    with Session(engine) as session:
        joined = repo.using(session)
        joined.add(LessonRecord("a.b", "x", status="active", applies_to=("tag:x", "id:a")))
        found = joined.candidates(Scope(tags=("x",)))
        assert [(lesson.entity_id, lesson.applies_to) for lesson in found] == [("a.b", ("tag:x",))]
        assert repo.candidates(Scope(tags=("x",))) == []  # not committed: others do not see it
        session.rollback()


def test_each_change_of_a_lessons_values_is_read_at_once_though_lessons_are_reused(
    engine: sa.Engine,
) -> None:
    repository = LessonRepository(engine)
    record = LessonRecord(
        entity_id="reuse.one",
        status="active",
        severity="critical",
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        applies_to=("id:team.a",),
        injection_form="first form",
        summary="s",
    )
    repository.add(record)
    scope = Scope(entity_ids=("team.a.agent",))
    first, again = repository.candidates(scope), repository.candidates(scope)
    assert first == again and first[0] is again[0]  # the same values make the same Lesson
    repository.update("reuse.one", injection_form="second form")
    assert [lesson.injection_form for lesson in repository.candidates(scope)] == ["second form"]
    repository.update("reuse.one", severity="info")
    found = repository.candidates(scope)
    assert [(lesson.injection_form, lesson.severity) for lesson in found] == [
        ("second form", "info")
    ]
    repository.retire("reuse.one")
    assert repository.candidates(scope) == []
