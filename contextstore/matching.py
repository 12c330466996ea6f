"""Pure lesson matcher: which durable lessons apply to an agent's scope, ranked and bounded.

No I/O, no clock, no storage imports. See SPEC §1.1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_K = 10
MAX_K = 25
DEFAULT_BYTE_BUDGET = 4096

_SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1}
_TAG = "tag:"
_ID = "id:"
_HEADER = "[Lessons — durable guidance distilled from prior work; matched {m}, showing {n}]"

# ASCII digits only: Python's \d would also accept e.g. Arabic-Indic digits.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?"
    r"(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


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
    each scope entity id (``a.b.c`` gives ``id:a``, ``id:a.b``, ``id:a.b.c``; empty segments
    are kept, so ``a..b`` gives ``id:a``, ``id:a.``, ``id:a..b``). A lesson is eligible for
    ``scope`` exactly when it is active and shares a key with this set, which is how storage
    finds candidates through an index instead of scanning. An empty scope gives an empty set.
    """
    keys = {_TAG + tag for tag in scope.tags if tag}
    for entity_id in scope.entity_ids:
        segments = entity_id.split(".")
        for i in range(1, len(segments) + 1):
            prefix = ".".join(segments[:i])
            if prefix:
                keys.add(_ID + prefix)
    return frozenset(keys)


def match(
    candidates: Iterable[Lesson], scope: Scope, opts: MatchOptions | None = None
) -> MatchResult:
    """Rank the eligible ``candidates`` for ``scope`` and keep what fits ``opts``.

    Eligible: ``status == "active"`` exactly, and some applies-to key matches (see
    ``lookup_keys``). Keys other than ``tag:<non-empty>`` / ``id:<non-empty>`` are ignored,
    prefixes are case-sensitive (``TAG:x`` never matches).

    Order: severity (``critical`` > ``warning`` > ``info`` > anything else, case-sensitive),
    then ``created_at`` newest first with empty or unparseable values last (see
    ``parse_rfc3339``), then ``entity_id`` ascending by code point. The sort is stable, so
    lessons equal on all three (duplicate ids with the same rank and instant) keep their input
    order; with distinct ids the result does not depend on the input order.

    Bounds: stop once ``k`` lessons are included, and stop at the first lesson whose form's
    UTF-8 length would push the running total over ``byte_budget`` — a later, smaller form is
    not tried. Empty forms cost 0 bytes but still count toward ``k``. A lone surrogate counts
    3 bytes (its ``surrogatepass`` encoding). ``opts=None`` means ``MatchOptions()``.

    Never raises on any string content.
    """
    opts = opts or MatchOptions()
    k = DEFAULT_K if opts.k <= 0 else min(opts.k, MAX_K)
    budget = DEFAULT_BYTE_BUDGET if opts.byte_budget <= 0 else opts.byte_budget

    tags = frozenset(tag for tag in scope.tags if tag)
    entity_segments = [eid.split(".") for eid in scope.entity_ids]
    eligible = [
        lesson
        for lesson in candidates
        if lesson.status == "active"
        and any(_key_matches(key, tags, entity_segments) for key in lesson.applies_to)
    ]
    eligible.sort(key=_rank_key)

    included: list[MatchedLesson] = []
    used = 0
    for lesson in eligible:
        if len(included) >= k:
            break
        cost = len(lesson.injection_form.encode("utf-8", "surrogatepass"))
        if used + cost > budget:
            break
        used += cost
        included.append(MatchedLesson(lesson.entity_id, lesson.injection_form))
    return MatchResult(tuple(included), len(eligible), len(included))


def render_lesson_block(result: MatchResult) -> str:
    """The lesson block for a prompt; ``""`` when ``result.included`` is empty.

    A header ``[Lessons — durable guidance distilled from prior work; matched M, showing N]``
    (U+2014 em dash; M is ``matched_count``, N is ``len(result.included)``), then one line
    ``- {injection_form} ({entity_id})`` per included lesson, joined with ``\\n`` and no
    trailing newline. Forms are written verbatim, newlines included.
    """
    if not result.included:
        return ""
    lines = [_HEADER.format(m=result.matched_count, n=len(result.included))]
    lines.extend(f"- {item.injection_form} ({item.entity_id})" for item in result.included)
    return "\n".join(lines)


def parse_rfc3339(value: str) -> int | None:
    """``value`` as integer nanoseconds since the Unix epoch, or ``None`` when unparseable.

    The strict RFC 3339 grammar Go's ``time.RFC3339`` layout stands for
    (``YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm)``): only an upper-case ``T`` and ``Z`` (Go
    matches layout literals byte for byte, so ``t``/``z`` are rejected), seconds required,
    an optional ``.`` fraction of any length truncated to nanoseconds as Go does, ASCII
    digits in fixed widths. Out-of-range fields are rejected: month 1–12, day within the
    month (leap years honoured), hour 0–23, minute and second 0–59 (no leap second, as Go),
    offset hour 0–23 and minute 0–59; year 0000–9999. A date alone, a space separator,
    surrounding whitespace, or a missing offset are unparseable. We do not follow the looser
    fallback of Go's generic ``time.Parse`` (one-digit hour, ``,`` as fraction separator).
    """
    m = _RFC3339.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    offset = 0
    if m.group(8) is None:
        off_h, off_m = int(m.group(10)), int(m.group(11))
        if off_h > 23 or off_m > 59:
            return None
        offset = (off_h * 60 + off_m) * 60 * (-1 if m.group(9) == "-" else 1)
    nanos = int((m.group(7) or "")[:9].ljust(9, "0"))
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return (seconds - offset) * 1_000_000_000 + nanos


def _key_matches(key: str, tags: frozenset[str], entity_segments: list[list[str]]) -> bool:
    if key.startswith(_TAG):
        return key[len(_TAG) :] in tags  # tags holds no "", so "tag:" never matches
    if key.startswith(_ID) and len(key) > len(_ID):
        prefix = key[len(_ID) :].split(".")
        n = len(prefix)
        return any(len(segs) >= n and segs[:n] == prefix for segs in entity_segments)
    return False


def _rank_key(lesson: Lesson) -> tuple[int, int, int, str]:
    instant = parse_rfc3339(lesson.created_at)
    dated = (0, -instant) if instant is not None else (1, 0)
    return (-_SEVERITY_RANK.get(lesson.severity, 0), *dated, lesson.entity_id)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    # Proleptic Gregorian day count (H. Hinnant's algorithm): datetime cannot represent
    # year 0000, which RFC 3339 and Go both accept.
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
