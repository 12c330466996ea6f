"""Session token budget: split one model window across prompt slots, then fill the slots.

Pure: no I/O beyond the optional one-time load of a tiktoken encoding, no clock, no storage
imports. See docs/design/budget.md.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from contextstore.errors import ValidationError

__all__ = [
    "BudgetAllocation",
    "CharTokenCounter",
    "ContextAssembler",
    "ContextBudget",
    "ContextSources",
    "PreparedContext",
    "TiktokenCounter",
    "TokenCounter",
    "default_token_counter",
]

logger = logging.getLogger(__name__)

MAX_TIKTOKEN_BYTES = 65_536
_MAX_TOKENS_LIMIT = 2**64  # exclusive; an unsigned 64-bit range (docs/decisions/0009)

# Slot shares by (memory_first, graph): summaries, semantic_recall, cross_session,
# code_context, graph_facts, recent_history. Each row sums to 1.0.
_SHARES: dict[tuple[bool, bool], tuple[float, float, float, float, float, float]] = {
    (False, False): (0.08, 0.08, 0.04, 0.30, 0.0, 0.50),
    (False, True): (0.07, 0.07, 0.03, 0.29, 0.04, 0.50),
    (True, False): (0.25, 0.25, 0.15, 0.35, 0.0, 0.0),
    (True, True): (0.22, 0.22, 0.12, 0.38, 0.06, 0.0),
}

_SLOTS = (
    "summaries",
    "semantic_recall",
    "cross_session",
    "code_context",
    "graph_facts",
    "recent_history",
)

_PREFIXES = {
    "summaries": "[conversation summaries]\n",
    "semantic_recall": "[semantic recall]\n",
    "cross_session": "[cross-session context]\n",
    "code_context": "## Relevant documents\n",
    "graph_facts": "[known facts]\n",
    "recent_history": "[recent history]\n",
}


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts the tokens of a text; must return an int ≥ 0 and not raise."""

    def count(self, text: str) -> int: ...


class CharTokenCounter:
    """``len(text) // 4`` in code points: ``""`` → 0, ``"abc"`` → 0, ``"abcd"`` → 1.

    The dependency-free default. Not memoised: ``len`` is O(1) on a ``str``.
    """

    def count(self, text: str) -> int:
        return len(text) // 4

    def __repr__(self) -> str:
        return "CharTokenCounter()"


class TiktokenCounter:
    """Exact tiktoken counts (``cl100k_base`` by default), chars/4 when that is not possible.

    Falls back to ``len(text) // 4`` for every text when tiktoken is not installed or the
    encoding cannot load (it is downloaded on first use, so offline it usually cannot); the
    failure is logged once per process and encoding at INFO, never raised. Texts over
    65,536 UTF-8 bytes also use chars/4, whatever the encoding, to bound the cost of one
    call. Special-token strings such as ``<|endoftext|>`` are counted as plain text.

    Counts are memoised per instance in an LRU of ``cache_size`` entries (default 1024).
    Only texts of at most 65,536 bytes are cached, so the cache pins at most
    ``cache_size`` × 64 KiB of text (64 MiB by default) and usually far less.
    """

    def __init__(self, encoding_name: str = "cl100k_base", *, cache_size: int = 1024) -> None:
        self._encoding_name = encoding_name
        self._encoding = _load_encoding(encoding_name)
        self._cached_count = functools.lru_cache(maxsize=cache_size)(self._encode_count)

    @property
    def uses_tiktoken(self) -> bool:
        """``False`` when the encoding could not load and every count is chars/4."""
        return self._encoding is not None

    def count(self, text: str) -> int:
        if self._encoding is None or _utf8_len_exceeds(text, MAX_TIKTOKEN_BYTES):
            return len(text) // 4
        return self._cached_count(text)

    def _encode_count(self, text: str) -> int:
        assert self._encoding is not None
        return len(self._encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        mode = "tiktoken" if self.uses_tiktoken else "chars/4 fallback"
        return f"TiktokenCounter({self._encoding_name!r}, {mode})"


def default_token_counter() -> TokenCounter:
    """A ``TiktokenCounter`` when its encoding loads, else a ``CharTokenCounter``."""
    counter = TiktokenCounter()
    return counter if counter.uses_tiktoken else CharTokenCounter()


@functools.lru_cache(maxsize=8)
def _load_encoding(name: str) -> Any:
    # Cached, failures included, so an offline process tries the download once, not per
    # counter.
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception as exc:  # ImportError, network and file errors alike mean "fall back"
        logger.info("tiktoken encoding %r unavailable (%s); counting tokens as chars/4", name, exc)
        return None


def _utf8_len_exceeds(text: str, limit: int) -> bool:
    # Every code point is 1–4 UTF-8 bytes, so most texts are decided without encoding.
    if len(text) > limit:
        return True
    if len(text) * 4 <= limit:
        return False
    return len(text.encode("utf-8", "surrogatepass")) > limit


@dataclass(frozen=True, slots=True)
class BudgetAllocation:
    """Tokens per prompt part for one turn. Every field is ≥ 0."""

    system_prompt: int
    skills: int
    summaries: int
    semantic_recall: int
    cross_session: int
    code_context: int
    graph_facts: int
    recent_history: int
    response_reserve: int
    session_digest: int
    lessons: int = 0

    def active_sources(self) -> int:
        """How many of summaries, semantic_recall, cross_session, code_context and
        graph_facts have a budget > 0."""
        sources = (
            self.summaries,
            self.semantic_recall,
            self.cross_session,
            self.code_context,
            self.graph_facts,
        )
        return sum(1 for tokens in sources if tokens > 0)


_ZERO = BudgetAllocation(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


class ContextBudget:
    """The token window of one agent session and how each turn divides it.

    ``max_tokens`` must be an int in ``[0, 2**64)`` and ``reserve_ratio`` a number, else
    ``ValidationError`` (a ``ValueError``) naming the field.
    ``reserve_ratio`` is any float; a negative or NaN reserve becomes 0, and a reserve at or
    beyond 2**64 (an infinite ratio included) saturates at 2**64 − 1, as an unsigned 64-bit cast
    to ``usize`` does, which leaves nothing available. Instances are immutable.
    """

    __slots__ = ("_graph_enabled", "_max_tokens", "_reserve_ratio")

    def __init__(self, max_tokens: int, reserve_ratio: float) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValidationError("max_tokens", f"must be an int, got {max_tokens!r}")
        if not 0 <= max_tokens < _MAX_TOKENS_LIMIT:
            raise ValidationError("max_tokens", f"must be in [0, 2**64), got {max_tokens}")
        if isinstance(reserve_ratio, bool) or not isinstance(reserve_ratio, int | float):
            raise ValidationError("reserve_ratio", f"must be a number, got {reserve_ratio!r}")
        self._max_tokens = int(max_tokens)
        try:
            self._reserve_ratio = float(reserve_ratio)
        except OverflowError:  # an int beyond float64: its f32 is infinite anyway
            self._reserve_ratio = math.inf if reserve_ratio > 0 else -math.inf
        self._graph_enabled = False

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    @property
    def reserve_ratio(self) -> float:
        return self._reserve_ratio

    @property
    def graph_enabled(self) -> bool:
        """The graph mode used when ``allocate`` gets ``graph_enabled=None``."""
        return self._graph_enabled

    def with_graph_enabled(self, enabled: bool) -> ContextBudget:
        """A new budget whose default graph mode is ``enabled``; ``self`` is unchanged."""
        other = ContextBudget(self._max_tokens, self._reserve_ratio)
        other._graph_enabled = enabled
        return other

    def allocate(
        self,
        system_prompt: str,
        skills_prompt: str,
        counter: TokenCounter,
        graph_enabled: bool | None = None,
    ) -> BudgetAllocation:
        """``allocate_with_opts`` with no digest, no lessons, and the default mode."""
        return self.allocate_with_opts(system_prompt, skills_prompt, counter, graph_enabled)

    def allocate_with_opts(
        self,
        system_prompt: str,
        skills_prompt: str,
        counter: TokenCounter,
        graph_enabled: bool | None = None,
        digest_tokens: int = 0,
        memory_first: bool = False,
        lesson_tokens: int = 0,
    ) -> BudgetAllocation:
        """Divide the window for one turn. Never raises (unless ``counter`` does).

        In order: ``max_tokens == 0`` gives all zeros without counting the prompts. The
        reserve is ``trunc(f32(max_tokens) * f32(reserve_ratio))``, where ``f32`` of an
        integer rounds once to nearest-even (:func:`f32_from_int`), negative or NaN → 0,
        saturating at 2**64 − 1. ``available`` is what
        is left after the reserve and both prompts (never below 0; an oversized prompt
        leaves every slot 0, while ``system_prompt``/``skills`` report the real counts).
        Then ``lessons = min(lesson_tokens, available)`` and ``session_digest =
        min(digest_tokens, available)`` are pinned, in that order, and subtracted; negative
        requests count as 0. Each slot is ``trunc(f32(available) * f32(share))`` with the
        shares of the mode (``graph_enabled`` argument, or this budget's default when
        ``None``; ``memory_first`` moves recent history's half to the memory slots). The
        remainder is not redistributed. Single-precision arithmetic is deliberate (the
        original computes in f32): 100 × 0.29 → 29 where float64 gives 28.

        The slots never sum to more than ``available`` while it is ≤ 2**24; above that,
        f32 rounding of ``available`` itself can overshoot by a few tokens.
        """
        if self._max_tokens == 0:
            return _ZERO
        graph = self._graph_enabled if graph_enabled is None else graph_enabled
        reserve = self._reserve()
        available = max(0, self._max_tokens - reserve)
        sp = max(0, counter.count(system_prompt))
        sk = max(0, counter.count(skills_prompt))
        available = max(0, available - sp - sk)
        lessons = min(max(0, lesson_tokens), available)
        available -= lessons
        digest = min(max(0, digest_tokens), available)
        available -= digest
        summ, recall, cross, code, facts, history = (
            _f32_share(available, share) for share in _SHARES[(memory_first, graph)]
        )
        return BudgetAllocation(
            system_prompt=sp,
            skills=sk,
            summaries=summ,
            semantic_recall=recall,
            cross_session=cross,
            code_context=code,
            graph_facts=facts,
            recent_history=history,
            response_reserve=reserve,
            session_digest=digest,
            lessons=lessons,
        )

    def _reserve(self) -> int:
        with np.errstate(all="ignore"):
            product = f32_from_int(self._max_tokens) * np.float32(self._reserve_ratio)
        return _saturating_usize(product)

    def __repr__(self) -> str:
        return (
            f"ContextBudget(max_tokens={self._max_tokens}, reserve_ratio={self._reserve_ratio}, "
            f"graph_enabled={self._graph_enabled})"
        )


def _f32_share(available: int, share: float) -> int:
    with np.errstate(all="ignore"):
        return _saturating_usize(f32_from_int(available) * np.float32(share))


_F32_MANTISSA_BITS = 24  # including the implicit leading bit


def f32_from_int(n: int) -> np.float32:
    """``n`` as a single-precision float, rounded once to nearest-even, like Rust's ``n as f32``.

    ``np.float32(n)`` is not that: numpy converts a Python int through float64 first, and the
    two roundings differ above 2**53 (9007199791611905 → 9007199254740992 instead of
    9007200328482816). Integers beyond the f32 range become ``±inf``.
    """
    magnitude = abs(n)
    extra_bits = magnitude.bit_length() - _F32_MANTISSA_BITS
    if extra_bits > 0:
        kept, dropped = divmod(magnitude, 1 << extra_bits)
        half = 1 << (extra_bits - 1)
        if dropped > half or (dropped == half and kept & 1):
            kept += 1
        # At most 25 significant bits now: float64 holds it exactly, so the float32 below
        # is exact too (or overflows to inf, as the cast would).
        magnitude = kept << extra_bits
    with np.errstate(over="ignore"):
        value = np.float32(float(magnitude)) if magnitude < 2**1024 else np.float32(np.inf)
    return -value if n < 0 else value


_USIZE_MAX = 2**64 - 1


def _saturating_usize(value: np.float32) -> int:
    """Rust's ``value as usize`` (64-bit): truncate toward zero; NaN and negatives → 0;
    anything at or above 2**64, infinity included, saturates at 2**64 − 1."""
    if math.isnan(value) or value <= 0:
        return 0
    if math.isinf(value) or value >= 2**64:
        return _USIZE_MAX
    return int(value)


@dataclass(frozen=True, slots=True)
class ContextSources:
    """Candidate items per slot, best first; each item becomes one line of its slot."""

    summaries: tuple[str, ...] = ()
    semantic_recall: tuple[str, ...] = ()
    cross_session: tuple[str, ...] = ()
    code_context: tuple[str, ...] = ()
    graph_facts: tuple[str, ...] = ()
    recent_history: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedContext:
    """One body per slot (``None`` when nothing fitted) and what filling them cost.

    ``total_tokens`` sums the counter's count of each non-None body; ``items_included`` and
    ``items_dropped`` count source items across all slots (a slot with budget 0 drops all).
    """

    summaries: str | None
    semantic_recall: str | None
    cross_session: str | None
    code_context: str | None
    graph_facts: str | None
    recent_history: str | None
    total_tokens: int = 0
    items_included: int = 0
    items_dropped: int = 0


class ContextAssembler:
    """Fills each slot of a ``BudgetAllocation`` from ``ContextSources``.

    A slot body is its prefix (``[conversation summaries]\\n``, ``[semantic recall]\\n``,
    ``[cross-session context]\\n``, ``## Relevant documents\\n`` for code context,
    ``[known facts]\\n`` for graph facts, ``[recent history]\\n`` — our choice, the source
    names none), then ``item + "\\n"`` per item in order, verbatim (an item containing
    newlines spans several lines). The prefix counts against the slot: the whole body, as
    counted by ``counter``, must fit the slot's budget. Filling stops at the first item
    that would exceed it; later, smaller items are not tried. A slot whose budget is 0,
    whose items are empty, or where even the first item does not fit is ``None``.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    def assemble(self, allocation: BudgetAllocation, sources: ContextSources) -> PreparedContext:
        bodies: list[str | None] = []
        total = included = dropped = 0
        for slot in _SLOTS:
            items: tuple[str, ...] = getattr(sources, slot)
            body, tokens, used = self._fill(_PREFIXES[slot], items, getattr(allocation, slot))
            bodies.append(body)
            total += tokens
            included += used
            dropped += len(items) - used
        summaries, semantic_recall, cross_session, code_context, graph_facts, history = bodies
        return PreparedContext(
            summaries,
            semantic_recall,
            cross_session,
            code_context,
            graph_facts,
            history,
            total_tokens=total,
            items_included=included,
            items_dropped=dropped,
        )

    def _fill(
        self, prefix: str, items: tuple[str, ...], budget: int
    ) -> tuple[str | None, int, int]:
        body, tokens, used = prefix, 0, 0
        if budget <= 0:
            return None, 0, 0
        for item in items:
            candidate = f"{body}{item}\n"
            # Counting the whole body, not summing per-line counts: a floored counter such
            # as chars/4 would otherwise let unlimited short lines through at 0 tokens each.
            candidate_tokens = self._counter.count(candidate)
            if candidate_tokens > budget:
                break
            body, tokens, used = candidate, candidate_tokens, used + 1
        return (body, tokens, used) if used else (None, 0, 0)
