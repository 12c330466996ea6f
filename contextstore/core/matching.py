"""Pure lesson matcher: which durable lessons apply to an agent's scope, ranked and bounded.

No I/O, no clock, no storage imports. See docs/design/matching.md: ``match`` picks the lessons,
``explain`` says for every candidate why it was or was not picked, and both walk the same
ranking (``_ranked``) and the same bounds (``_bound``), so they cannot disagree.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contextstore.core.ranking import RankingParameters, average_length, idf, query_terms
from contextstore.core.tokens import tokenize
from contextstore.errors import ValidationError

DEFAULT_K = 10
MAX_K = 25
DEFAULT_BYTE_BUDGET = 4096
# A run's trace names at most this many of the lessons it matched: the included ones and the
# next in rank order (docs/decisions/0091-a-runs-trace-names-64-matched-lessons.md).
TRACED_MATCHES = 64

ORDERS = ("severity", "relevance")
"""``MatchOptions.order`` values; ``"severity"`` is the documented default order
(docs/design/matching.md)."""

_SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1}
# BM25's constants: the retrievers' defaults.
_BM25 = RankingParameters()
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
    # Read only by ``order="relevance"``; the other orders never look at it.
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Scope:
    """An agent's applicability scope. Empty (no ids and no tags) matches nothing."""

    entity_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MatchOptions:
    """``k`` lessons at most (≤0 → 10, >25 → 25); ``byte_budget`` bytes of forms (≤0 → 4096).

    ``order`` is ``"severity"`` (severity, newest, entity id: the default order) or
    ``"relevance"`` (within one severity, BM25 of the query first; see ``match``). Any other
    value raises ``ValidationError("order", …)``.
    """

    k: int = 0
    byte_budget: int = 0
    order: str = "severity"

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValidationError(
                "order", f"must be one of {', '.join(ORDERS)}, got {self.order!r}"
            )


@dataclass(frozen=True, slots=True)
class MatchedLesson:
    entity_id: str
    injection_form: str


@dataclass(frozen=True, slots=True)
class MatchResult:
    included: tuple[MatchedLesson, ...]
    matched_count: int
    included_count: int


NOT_ACTIVE = "not active"
NO_KEY_MATCHES = "no key matches"
EXCLUDED_BY_K = "k"
EXCLUDED_BY_BYTE_BUDGET = "byte_budget"


@dataclass(frozen=True, slots=True)
class LessonExplanation:
    """Why one candidate was or was not included by ``match`` (see ``explain``).

    ``matched_keys``: the candidate's applies-to keys that match the scope, in its own order
    (found whatever its status). ``reason``: ``"not active"`` (checked first),
    ``"no key matches"`` or ``None`` when eligible. ``rank``: 1-based position in the order
    among the eligible, ``None`` when not eligible. ``excluded_by``: ``"k"`` (``k`` lessons
    were already included) or ``"byte_budget"`` (this form, or an earlier one the walk
    stopped at, did not fit), ``None`` when included or not eligible. ``relevance``: the BM25
    score under ``order="relevance"``, else ``None``. ``form_bytes``: the form's UTF-8 length.
    """

    entity_id: str
    matched_keys: tuple[str, ...]
    eligible: bool
    reason: str | None
    rank: int | None
    included: bool
    excluded_by: str | None
    relevance: float | None
    form_bytes: int


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
    candidates: Iterable[Lesson],
    scope: Scope,
    opts: MatchOptions | None = None,
    query: str | None = None,
) -> MatchResult:
    """Rank the eligible ``candidates`` for ``scope`` and keep what fits ``opts``.

    Eligible: ``status == "active"`` exactly, and some applies-to key matches (see
    ``lookup_keys``). Keys other than ``tag:<non-empty>`` / ``id:<non-empty>`` are ignored,
    prefixes are case-sensitive (``TAG:x`` never matches).

    Order ``"severity"`` (the default): severity (``critical`` > ``warning`` > ``info`` >
    anything else, case-sensitive), then ``created_at`` newest first with empty or
    unparseable values last (see ``parse_rfc3339``), then ``entity_id`` ascending by code
    point. The sort is stable, so lessons equal on all three (duplicate ids with the same rank
    and instant) keep their input order; with distinct ids the result does not depend on the
    input order. ``query`` is not read.

    Order ``"relevance"``: within one severity, a higher BM25 score of ``query`` over the
    lesson's ``summary`` and ``injection_form`` first, then as above. The BM25 statistics
    (document frequencies, mean length) are those of the eligible lessons only, so a score
    depends on the set matched, never on the candidates' order. A ``None``, empty or
    stop-word-free query scores every lesson 0, which gives the severity order.

    Bounds: stop once ``k`` lessons are included, and stop at the first lesson whose form's
    UTF-8 length would push the running total over ``byte_budget`` — a later, smaller form is
    not tried. Empty forms cost 0 bytes but still count toward ``k``. A lone surrogate counts
    3 bytes (its ``surrogatepass`` encoding). ``opts=None`` means ``MatchOptions()``.

    Never raises on any string content.
    """
    return match_traced(candidates, scope, opts, query)[0]


def match_traced(
    candidates: Iterable[Lesson],
    scope: Scope,
    opts: MatchOptions | None = None,
    query: str | None = None,
) -> tuple[MatchResult, tuple[str, ...]]:
    """``match``, and the ids a run's trace records as matched: the first ``TRACED_MATCHES``
    eligible lessons in ``match``'s order (every included one among them, as ``MAX_K`` is
    smaller), ascending by code point. Fewer eligible: all of them (``eligible_ids``)."""
    opts = opts or MatchOptions()
    ranked = _ranked(candidates, scope, opts, query)
    count, _ = _bound([lesson for lesson, _ in ranked], opts)
    included = tuple(
        MatchedLesson(lesson.entity_id, lesson.injection_form) for lesson, _ in ranked[:count]
    )
    traced = tuple(sorted(lesson.entity_id for lesson, _ in ranked[:TRACED_MATCHES]))
    return MatchResult(included, len(ranked), count), traced


def explain(
    candidates: Iterable[Lesson],
    scope: Scope,
    options: MatchOptions | None = None,
    query: str | None = None,
) -> tuple[LessonExplanation, ...]:
    """One ``LessonExplanation`` per candidate: what ``match`` did with it, and why.

    The eligible candidates come first, in ``match``'s order (``rank`` 1, 2, …), then the
    ineligible ones in their input order. ``match(candidates, scope, options, query)``
    includes exactly the explanations with ``included`` set, in rank order, and its
    ``matched_count`` is the number with ``eligible`` set. Never raises on string content.
    """
    options = options or MatchOptions()
    candidates = list(candidates)
    tags, entity_segments = _scope_parts(scope)
    ranked = _ranked(candidates, scope, options, query)
    count, stop = _bound([lesson for lesson, _ in ranked], options)
    relevance = options.order == "relevance"
    explained: list[LessonExplanation] = []
    for position, (lesson, score) in enumerate(ranked):
        included = position < count
        explained.append(
            LessonExplanation(
                entity_id=lesson.entity_id,
                matched_keys=_matched_keys(lesson, tags, entity_segments),
                eligible=True,
                reason=None,
                rank=position + 1,
                included=included,
                excluded_by=None if included else stop,
                relevance=score if relevance else None,
                form_bytes=_form_bytes(lesson),
            )
        )
    for lesson in candidates:
        keys = _matched_keys(lesson, tags, entity_segments)
        if lesson.status == "active" and keys:
            continue
        explained.append(
            LessonExplanation(
                entity_id=lesson.entity_id,
                matched_keys=keys,
                eligible=False,
                reason=NOT_ACTIVE if lesson.status != "active" else NO_KEY_MATCHES,
                rank=None,
                included=False,
                excluded_by=None,
                relevance=None,
                form_bytes=_form_bytes(lesson),
            )
        )
    return tuple(explained)


def eligible_ids(candidates: Iterable[Lesson], scope: Scope) -> tuple[str, ...]:
    """The entity ids of the eligible candidates, ascending by code point (``matched_count``
    of them): what a run's trace records as the lessons it matched."""
    tags, entity_segments = _scope_parts(scope)
    return tuple(
        sorted(lesson.entity_id for lesson in _eligible(candidates, tags, entity_segments))
    )


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


# Ranking parses each candidate's ``created_at`` on every run, and a fleet's runs see the
# same few lessons again and again: the parse is a pure function of the string, kept for the
# most recent ones.
@functools.lru_cache(maxsize=4096)
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


def _scope_parts(scope: Scope) -> tuple[frozenset[str], list[list[str]]]:
    tags = frozenset(tag for tag in scope.tags if tag)
    return tags, [eid.split(".") for eid in scope.entity_ids]


def _eligible(
    candidates: Iterable[Lesson], tags: frozenset[str], entity_segments: list[list[str]]
) -> list[Lesson]:
    return [
        lesson
        for lesson in candidates
        if lesson.status == "active"
        and any(_key_matches(key, tags, entity_segments) for key in lesson.applies_to)
    ]


def _matched_keys(
    lesson: Lesson, tags: frozenset[str], entity_segments: list[list[str]]
) -> tuple[str, ...]:
    return tuple(key for key in lesson.applies_to if _key_matches(key, tags, entity_segments))


def _form_bytes(lesson: Lesson) -> int:
    return len(lesson.injection_form.encode("utf-8", "surrogatepass"))


def _ranked(
    candidates: Iterable[Lesson], scope: Scope, opts: MatchOptions, query: str | None
) -> list[tuple[Lesson, float]]:
    """The eligible candidates in ``opts.order``, each with its relevance (0.0 by severity)."""
    tags, entity_segments = _scope_parts(scope)
    eligible = _eligible(candidates, tags, entity_segments)
    if opts.order == "relevance" and query:
        scores = _bm25(eligible, query)
        scored = list(zip(eligible, scores, strict=True))
        scored.sort(key=lambda item: _relevance_key(item[0], item[1]))
        return scored
    eligible.sort(key=_rank_key)
    return [(lesson, 0.0) for lesson in eligible]


def _bound(ranked: Sequence[Lesson], opts: MatchOptions) -> tuple[int, str | None]:
    """How many of ``ranked`` fit ``opts``, and what stopped the walk (``None``: nothing)."""
    k = DEFAULT_K if opts.k <= 0 else min(opts.k, MAX_K)
    budget = DEFAULT_BYTE_BUDGET if opts.byte_budget <= 0 else opts.byte_budget
    used = 0
    for count, lesson in enumerate(ranked):
        if count >= k:
            return count, EXCLUDED_BY_K
        cost = _form_bytes(lesson)
        if used + cost > budget:
            return count, EXCLUDED_BY_BYTE_BUDGET
        used += cost
    return len(ranked), None


def _bm25(lessons: Sequence[Lesson], query: str) -> list[float]:
    """Okapi BM25 of ``query`` over each lesson's summary and form, against ``lessons``' own
    statistics, with the retrievers' ``idf``, tokenizer, stop words and constants."""
    terms = query_terms(query)
    documents = [
        Counter(tokenize(f"{lesson.summary}\n{lesson.injection_form}")) for lesson in lessons
    ]
    if not terms or not documents:
        return [0.0] * len(documents)
    lengths = [sum(document.values()) for document in documents]
    # An integer sum divided once: the same mean whatever order the lessons came in.
    average = average_length(len(documents), sum(lengths))
    weights = {
        term: idf(len(documents), sum(1 for document in documents if term in document))
        for term in terms
    }
    k1, b = _BM25.k1, _BM25.b
    scores = []
    for document, length in zip(documents, lengths, strict=True):
        norm = k1 * (1.0 - b + b * length / average)
        score = 0.0
        for term in terms:  # the query's order, so the float sum is the same every time
            tf = document.get(term, 0)
            if tf:
                score += weights[term] * tf * (k1 + 1.0) / (tf + norm)
        scores.append(score)
    return scores


def _relevance_key(lesson: Lesson, score: float) -> tuple[int, float, int, int, str]:
    severity, undated, newest, entity_id = _rank_key(lesson)
    return (severity, -score, undated, newest, entity_id)


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
