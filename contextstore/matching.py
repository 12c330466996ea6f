"""Pure lesson matcher: which durable lessons apply to an agent's scope, ranked and bounded.

No I/O, no clock, no storage imports. See SPEC §1.1.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_K = 10
MAX_K = 25
DEFAULT_BYTE_BUDGET = 4096


@dataclass(frozen=True, slots=True)
class Lesson:
    """The matcher's projection of a lesson record (fields it does not read are absent)."""

    entity_id: str
    status: str
    severity: str
    created_at: str
    applies_to: tuple[str, ...]
    injection_form: str


@dataclass(frozen=True, slots=True)
class Scope:
    """An agent's applicability scope. Empty (no ids and no tags) matches nothing."""

    entity_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MatchOptions:
    """``k`` lessons at most (≤0 → 10, >25 → 25); ``byte_budget`` bytes of forms (≤0 → 4096)."""

    k: int = 0
    byte_budget: int = 0


@dataclass(frozen=True, slots=True)
class MatchedLesson:
    entity_id: str
    injection_form: str


@dataclass(frozen=True, slots=True)
class MatchResult:
    included: tuple[MatchedLesson, ...]
    matched_count: int
    included_count: int


def lookup_keys(scope: Scope) -> frozenset[str]:
    """Every applies-to key the matcher could accept for ``scope``.

    ``tag:X`` for each non-empty scope tag and ``id:P`` for each non-empty segment-prefix P of
    each scope entity id (``a.b.c`` gives ``id:a``, ``id:a.b``, ``id:a.b.c``). A lesson is
    eligible for ``scope`` exactly when it is active and shares a key with this set, which is
    how storage finds candidates through an index instead of scanning.
    """
    raise NotImplementedError


def match(candidates: object, scope: Scope, opts: MatchOptions | None = None) -> MatchResult:
    raise NotImplementedError


def render_lesson_block(result: MatchResult) -> str:
    raise NotImplementedError
