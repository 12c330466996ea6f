"""Lessons proposed by agents: the checks and rows ``LessonRepository.propose`` adds.

A proposal is a lesson with status ``proposed`` (never matched until it is activated), its
``evidence`` naming the run or the query that taught it, and a ``lesson_proposals`` row
saying which namespace proposed it, who, and when; the audit names the proposer too, as the
actor of the lesson's insert. Every function here runs inside the repository's write
transaction, so a refusal writes nothing.

Two refusals are particular to proposals: one saying what a lesson already says for the same
scope keys (``ValidationError("injection_form")`` naming that lesson), and one past the
namespace's cap (``RateLimitedError``). The cap is counted over the last hour of the
namespace's proposals; on PostgreSQL the namespace's ``proposal_limits`` row is locked for
the count and the insert, so concurrent proposals never exceed it (SQLite's write lock
already serialises them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.models import (
    LessonProposalRow,
    LessonRow,
    LessonScopeRow,
    ProposalLimitRow,
)
from contextstore.core.lessons import LessonRecord
from contextstore.core.validation import check_integer, storable_text
from contextstore.errors import RateLimitedError, ValidationError

PROPOSALS: Final = cast(sa.Table, LessonProposalRow.__table__)
LIMITS: Final = cast(sa.Table, ProposalLimitRow.__table__)
LESSONS: Final = cast(sa.Table, LessonRow.__table__)
SCOPES: Final = cast(sa.Table, LessonScopeRow.__table__)
PROPOSAL_WINDOW: Final = timedelta(hours=1)
MAX_REASON_CHARS: Final = 2_000
MAX_PER_HOUR: Final = 1_000_000
EVIDENCE_KEYS: Final = ("run", "query")


@dataclass(frozen=True)
class Proposal:
    """Who proposed a lesson, from which namespace and when, and its review if it had one:
    ``reviewer`` and ``reviewed_at`` once accepted or rejected, ``reason`` when rejected."""

    entity_id: str
    namespace: str
    proposer: str
    proposed_at: datetime
    reviewer: str | None = None
    reviewed_at: datetime | None = None
    reason: str | None = None


def check_proposal(record: LessonRecord) -> LessonRecord:
    """A proposal's own rules (the record is validated as any lesson besides): status
    ``proposed``, and evidence that names the run or the query that taught it."""
    if record.status != "proposed":
        raise ValidationError(
            "status", f"a proposal is 'proposed' until it is reviewed, not {record.status!r}"
        )
    evidence = record.evidence
    if not isinstance(evidence, Mapping) or not any(
        evidence.get(name) not in (None, "", {}, []) for name in EVIDENCE_KEYS
    ):
        raise ValidationError(
            "evidence",
            "must name what taught the lesson: an object with 'query' (the question) "
            'or \'run\' (the run), e.g. {"query": "…"}',
        )
    return record


def check_reason(reason: object) -> str:
    text = storable_text(reason, "reason").strip()
    if not text:
        raise ValidationError("reason", "say why the proposal is rejected")
    if len(text) > MAX_REASON_CHARS:
        raise ValidationError("reason", f"must be at most {MAX_REASON_CHARS} characters")
    return text


def check_per_hour(per_hour: object) -> int | None:
    if per_hour is None:
        return None
    return check_integer(per_hour, "per_hour", minimum=0, maximum=MAX_PER_HOUR)


def admit(
    session: Session, record: LessonRecord, *, namespace: str, proposer: str, now: datetime
) -> None:
    """Refuse ``record`` past the namespace's cap or as a twin of a stored lesson; else
    write its ``lesson_proposals`` row (the caller inserts the lesson)."""
    _check_cap(session, namespace, now)
    twin = _twin(session, record)
    if twin is not None:
        raise ValidationError(
            "injection_form",
            f"lesson {twin!r} already says this for the same scope keys; "
            "propose a change to it instead",
        )
    session.execute(
        sa.insert(PROPOSALS).values(
            lesson_id=record.entity_id, namespace=namespace, proposer=proposer, proposed_at=now
        )
    )


def _check_cap(session: Session, namespace: str, now: datetime) -> None:
    query = sa.select(LIMITS.c.per_hour).where(LIMITS.c.namespace == namespace)
    query = dialect_of(session.get_bind()).locked_for_update(query)
    cap = session.scalar(query)
    if cap is None:
        return
    recent = sa.select(PROPOSALS.c.proposed_at).where(
        PROPOSALS.c.namespace == namespace, PROPOSALS.c.proposed_at > now - PROPOSAL_WINDOW
    )
    times = sorted(session.scalars(recent))
    if len(times) < cap:
        return
    # One more is accepted once the oldest proposal that counts leaves the window.
    freed = times[len(times) - cap] + PROPOSAL_WINDOW if cap else now + PROPOSAL_WINDOW
    wait = max(1, math.ceil((freed - now).total_seconds()))
    raise RateLimitedError(
        f"namespace {namespace!r} may propose at most {cap} lesson(s) an hour; "
        f"try again in {wait} s",
        retry_after=wait,
    )


def _twin(session: Session, record: LessonRecord) -> str | None:
    """A stored lesson with the same injection form and the same scope keys, if any."""
    same_form = list(
        session.scalars(
            sa.select(LESSONS.c.entity_id)
            .where(LESSONS.c.injection_form == record.injection_form)
            .order_by(LESSONS.c.entity_id)
        )
    )
    if not same_form:
        return None
    keys: dict[str, set[str]] = {entity_id: set() for entity_id in same_form}
    for lesson_id, scope_key in session.execute(
        sa.select(SCOPES.c.lesson_id, SCOPES.c.scope_key).where(SCOPES.c.lesson_id.in_(same_form))
    ):
        keys[lesson_id].add(scope_key)
    wanted = set(record.applies_to)
    return next((entity_id for entity_id in same_form if keys[entity_id] == wanted), None)


def record_review(
    session: Session, entity_id: str, reviewer: str, now: datetime, reason: str | None
) -> None:
    """Stamp the lesson's latest proposal row with its review."""
    latest = (
        sa.select(sa.func.max(PROPOSALS.c.id))
        .where(PROPOSALS.c.lesson_id == entity_id)
        .scalar_subquery()
    )
    session.execute(
        sa.update(PROPOSALS)
        .where(PROPOSALS.c.id == latest)
        .values(reviewer=reviewer, reviewed_at=now, reason=reason)
    )


def proposals_of(session: Session, entity_ids: Sequence[str]) -> dict[str, Proposal]:
    """The latest proposal of each of ``entity_ids`` that was proposed (others are absent)."""
    found: dict[str, Proposal] = {}
    unique = sorted(set(entity_ids))
    for start in range(0, len(unique), 500):
        rows = session.execute(
            sa.select(PROPOSALS)
            .where(PROPOSALS.c.lesson_id.in_(unique[start : start + 500]))
            .order_by(PROPOSALS.c.id)
        )
        for row in rows:
            found[row.lesson_id] = Proposal(
                entity_id=row.lesson_id,
                namespace=row.namespace,
                proposer=row.proposer,
                proposed_at=row.proposed_at,
                reviewer=row.reviewer,
                reviewed_at=row.reviewed_at,
                reason=row.reason,
            )
    return found


def limit_of(session: Session, namespace: str) -> int | None:
    return cast(
        int | None,
        session.scalar(sa.select(LIMITS.c.per_hour).where(LIMITS.c.namespace == namespace)),
    )


def set_limit(session: Session, namespace: str, per_hour: int | None) -> None:
    session.execute(sa.delete(LIMITS).where(LIMITS.c.namespace == namespace))
    if per_hour is not None:
        session.execute(sa.insert(LIMITS).values(namespace=namespace, per_hour=per_hour))
