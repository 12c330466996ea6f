"""``candidates(scope)``: exactly the lessons the matcher would accept, found through the index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore.lessons import LessonRecord
from contextstore.matching import Scope, match
from contextstore.sql.repository import LessonRepository

# A tiny alphabet so prefixes, tags and ids collide often; "" makes empty segments in keys and
# scope ids (which lesson entity ids may not have, but keys and scopes may).
KEY_SEGMENTS = st.sampled_from(["a", "b", "A", ""])
ID_SEGMENTS = st.sampled_from(["a", "b", "A"])
TAGS = st.sampled_from(["x", "y", "X", "x.y", ""])


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
        connection.execute(sa.text("UPDATE lessons SET status = 'retired', superseded_by = NULL"))
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
    everything = [record.to_lesson() for record in repo.list()]
    for scope in scopes:
        accepted = [lesson for lesson in everything if match([lesson], scope).matched_count == 1]
        found = repo.candidates(scope)
        assert sorted(found, key=lambda lesson: lesson.entity_id) == sorted(
            accepted, key=lambda lesson: lesson.entity_id
        )


def test_an_empty_scope_has_no_candidates_and_sends_no_query(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.add(LessonRecord("a.b", "x", status="active", applies_to=("tag:x",)))
    with captured(engine) as statements:
        assert repo.candidates(Scope()) == []
        assert repo.candidates(Scope(entity_ids=("",), tags=("",))) == []
    assert statements == []


class captured:
    """Collects the (statement, parameters) pairs an engine sends while active."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] = []

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        self.statements.append((statement, parameters))

    def __enter__(self) -> list[tuple[str, Any]]:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self.statements

    def __exit__(self, *_: object) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)


@pytest.fixture
def fleet(engine: sa.Engine) -> Iterator[sa.Engine]:
    """5,000 active lessons, each tag shared by ten of them, statistics gathered."""
    rows = [
        {"entity_id": f"fleet.team{i % 40}.agent{i}", "status": "active", "injection_form": "x"}
        for i in range(5000)
    ]
    keys = [
        {"lesson_id": row["entity_id"], "scope_key": key, "position": position}
        for i, row in enumerate(rows)
        for position, key in enumerate([f"tag:t{i % 500}", f"id:fleet.team{i % 40}.agent{i}"])
    ]
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
    with engine.connect() as connection:
        connection.execute(sa.text("ANALYZE"))
        connection.commit()
    yield engine


def test_candidates_use_the_scope_key_index_not_a_scan(
    fleet: sa.Engine, repo: LessonRepository
) -> None:
    """EXPLAIN the very statement the repository sends, with the planner left free."""
    scope = Scope(entity_ids=("fleet.team3.agent43",), tags=("t7",))
    with captured(fleet) as statements:
        found = repo.candidates(scope)
    assert {lesson.entity_id for lesson in found} >= {"fleet.team3.agent43", "fleet.team7.agent7"}
    statements = [(sql, params) for sql, params in statements if sql.startswith("SELECT")]
    assert len(statements) == 2  # the active lessons by key, then their keys in order
    explain = "EXPLAIN QUERY PLAN " if fleet.dialect.name == "sqlite" else "EXPLAIN "
    plans = []
    with fleet.connect() as connection:
        for statement, parameters in statements:
            rows = connection.exec_driver_sql(explain + statement, parameters)
            plans.append("\n".join(" ".join(str(cell) for cell in row) for row in rows) + "\n")
    assert "ix_lesson_scopes_scope_key" in plans[0], plans[0]
    assert "pk_lessons" in plans[0] or "sqlite_autoindex_lessons" in plans[0], plans[0]
    for plan in plans:
        for table in ("lessons", "lesson_scopes"):
            assert f"Seq Scan on {table} " not in plan, plan  # PostgreSQL
            assert f"SCAN {table}\n" not in plan and f"SCAN {table} " not in plan, plan  # SQLite
