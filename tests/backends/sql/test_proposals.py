"""Lessons proposed by agents (``LessonRepository.propose``, ``accept``, ``reject``) on SQLite
and PostgreSQL, through the sync repository and its asyncio twin."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Scope
from contextstore.errors import RateLimitedError, ValidationError
from tests.backends.sql.conftest import TickingClock, counts, flavoured

EVIDENCE = {"query": "Why did the failover stall?", "run": 41}


def proposal(entity_id: str = "ops.lag", form: str = "Check replica lag first.") -> LessonRecord:
    return LessonRecord(
        entity_id, form, "warning", "proposed", ("tag:ops", "tag:db"), evidence=EVIDENCE
    )


@pytest.fixture
def agent(engine: sa.Engine, clock: TickingClock, flavour: str, database_url: str) -> Iterator[Any]:
    """The repository an agent proposes through: actor ``agent:7``, namespace ``ops``."""
    from contextstore.backends.sql.aio import AsyncLessonRepository

    options = {"clock": clock, "actor": "agent:7", "namespace": "ops"}
    with flavoured(
        flavour,
        database_url,
        lambda: LessonRepository(engine, **options),
        lambda async_engine: AsyncLessonRepository(async_engine, **options),
    ) as made:
        yield made


@pytest.fixture
def admin(engine: sa.Engine, clock: TickingClock) -> LessonRepository:
    return LessonRepository(engine, clock=clock, actor="admin:1")


def test_a_proposal_is_stored_proposed_with_its_proposer_and_never_matched(
    agent: Any, admin: LessonRepository
) -> None:
    stored = agent.propose(proposal())
    assert (stored.status, stored.evidence) == ("proposed", EVIDENCE)
    assert admin.get("ops.lag") == stored
    assert admin.candidates(Scope(tags=("ops",))) == []
    events = admin.history("ops.lag")
    assert [(e.event, e.new_status, e.actor) for e in events] == [
        ("insert", "proposed", "agent:7"),
        ("scope", None, "agent:7"),
        ("scope", None, "agent:7"),
    ]
    made = admin.proposals(["ops.lag", "unknown"])
    assert list(made) == ["ops.lag"]
    assert (made["ops.lag"].proposer, made["ops.lag"].namespace) == ("agent:7", "ops")
    assert made["ops.lag"].proposed_at == stored.created_at
    assert made["ops.lag"].reviewer is None


def test_a_proposal_identical_to_a_lesson_is_refused_naming_it(
    agent: Any, admin: LessonRepository, engine: sa.Engine
) -> None:
    admin.add(
        LessonRecord(
            "ops.first", "Check replica lag first.", "info", "active", ("tag:db", "tag:ops")
        )
    )
    before = counts(engine)
    with pytest.raises(ValidationError) as refused:
        agent.propose(proposal())
    assert refused.value.field == "injection_form"
    assert "lesson 'ops.first' already says this" in refused.value.message
    assert counts(engine) == before
    # Another key set, or another form, is a different lesson.
    agent.propose(
        LessonRecord(
            "ops.other", "Check replica lag first.", applies_to=("tag:ops",), evidence=EVIDENCE
        )
    )
    agent.propose(proposal("ops.lag2", "Check replica lag twice."))


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (LessonRecord("ops.x", "Form.", status="active", evidence=EVIDENCE), "status"),
        (LessonRecord("ops.x", "Form.", applies_to=("tag:ops",)), "evidence"),
        (LessonRecord("ops.x", "Form.", evidence={"query": ""}), "evidence"),
        (LessonRecord("ops.x", "Form.", evidence={"why": "a hunch"}), "evidence"),
        (LessonRecord("ops..x", "Form.", evidence=EVIDENCE), "entity_id"),
        (LessonRecord("ops.x", "x" * 321, evidence=EVIDENCE), "injection_form"),
    ],
)
def test_a_malformed_proposal_is_refused_naming_the_field(
    agent: Any, engine: sa.Engine, record: LessonRecord, field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        agent.propose(record)
    assert refused.value.field == field
    assert counts(engine) == (0, 0, 0)


def test_the_namespace_cap_counts_the_last_hour(
    agent: Any, admin: LessonRepository, clock: TickingClock, engine: sa.Engine
) -> None:
    admin.set_proposal_limit(2, namespace="ops")
    assert admin.proposal_limit("ops") == 2
    assert admin.proposal_limit("billing") is None
    first = agent.propose(proposal("ops.a", "A."))
    agent.propose(proposal("ops.b", "B."))
    before = counts(engine)
    with pytest.raises(RateLimitedError) as refused:
        agent.propose(proposal("ops.c", "C."))
    assert counts(engine) == before
    assert str(refused.value).startswith("namespace 'ops' may propose at most 2 lesson(s) an hour")
    assert first.created_at is not None
    # The first proposal leaves the window an hour after it was made.
    waited = first.created_at + timedelta(hours=1) - clock.now
    assert refused.value.retry_after == int(waited.total_seconds()) + 1
    # Another namespace has its own count, and the cap lifts as the hour passes.
    LessonRepository(engine, clock=clock, namespace="billing").propose(proposal("b.a", "BA."))
    clock.now += timedelta(hours=1)
    agent.propose(proposal("ops.c", "C."))
    admin.set_proposal_limit(None, namespace="ops")
    assert admin.proposal_limit("ops") is None


def test_accept_edits_and_activates_reject_retires_with_the_reason(
    agent: Any, engine: sa.Engine, clock: TickingClock
) -> None:
    agent.propose(proposal("ops.a", "A."))
    agent.propose(proposal("ops.b", "B."))
    reviewer = LessonRepository(engine, clock=clock, actor="console:k1")
    accepted = reviewer.accept("ops.a", injection_form="A, edited.", severity="critical")
    assert (accepted.status, accepted.injection_form, accepted.severity) == (
        "active",
        "A, edited.",
        "critical",
    )
    assert [lesson.entity_id for lesson in reviewer.candidates(Scope(tags=("ops",)))] == ["ops.a"]
    rejected = reviewer.reject("ops.b", "  Too vague to act on. ")
    assert rejected.status == "retired"
    reviews = reviewer.proposals(["ops.a", "ops.b"])
    assert (reviews["ops.a"].reviewer, reviews["ops.a"].reason) == ("console:k1", None)
    assert (reviews["ops.b"].reviewer, reviews["ops.b"].reason) == (
        "console:k1",
        "Too vague to act on.",
    )
    assert [(e.event, e.actor) for e in reviewer.history("ops.b")][-1] == ("status", "console:k1")
    for review, field in [
        (lambda: reviewer.reject("ops.a", "no"), "status"),
        (lambda: reviewer.accept("ops.b"), "status"),
        (lambda: reviewer.reject("ops.b", "   "), "reason"),
        (lambda: reviewer.accept("ops.a", status="active"), "status"),
    ]:
        with pytest.raises(ValidationError) as refused:
            review()
        assert refused.value.field == field


PROPOSER = """
import sys
from contextstore import LessonRecord, connect
from contextstore.errors import RateLimitedError

url, worker = sys.argv[1], sys.argv[2]
accepted = 0
with connect(database_url=url, redis_url="", namespace="ops") as store:
    for number in range(4):
        record = LessonRecord(f"ops.{worker}.{number}", f"{worker} {number}.",
                              applies_to=("tag:ops",), evidence={"query": "q"})
        try:
            store.lessons.propose(record)
            accepted += 1
        except RateLimitedError:
            pass
print(accepted)
"""


@pytest.mark.slow
def test_processes_proposing_at_once_never_pass_the_cap(
    database_url: str, admin: LessonRepository
) -> None:
    admin.set_proposal_limit(5, namespace="ops")
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", PROPOSER, database_url, f"w{index}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(3)
    ]
    accepted = [int(worker.communicate(timeout=300)[0]) for worker in workers]
    assert sum(accepted) == 5
    assert len(admin.list(status="proposed")) == 5
