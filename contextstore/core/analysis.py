"""Bilingual (English and Arabic) query analysis and per-query budget splitting
(docs/design/analysis.md)."""

from __future__ import annotations

import logging
import math
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from contextstore.config import AnalyzerConfig
from contextstore.core.analysis_lexicon import (
    ARABIC_WH_PREFIXES,
    ARABIC_YES_NO_PREFIXES,
    ENGLISH_STOP_WORDS,
    ENGLISH_WH_PREFIXES,
    ENGLISH_YES_NO_PREFIXES,
    INTENT_SIGNALS,
    STOP_WORDS,
)
from contextstore.core.text import analysed_part, fold_arabic

logger = logging.getLogger(__name__)


class QueryComplexity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class QueryIntent(StrEnum):
    FACTUAL = "factual"
    REASONING = "reasoning"
    COMPARATIVE = "comparative"
    PROCEDURAL = "procedural"
    CODE = "code"
    SUMMARIZE = "summarize"
    # Only for an empty or blank query, which has no intent at all (docs/decisions/0008).
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """What the analyzer concluded about one query; ``context_budget`` is in characters."""

    original_query: str
    normalized: str
    intent: QueryIntent
    complexity: QueryComplexity
    keywords: tuple[str, ...]
    entities: tuple[str, ...]
    is_arabic: bool
    language: str
    question_type: str
    context_budget: int


MAX_KEYWORDS: Final = 12

_SPACES = re.compile(r"\s+")
_ARABIC_CHAR = re.compile("[\u0600-\u06ff]")

# Both alternations are word-bounded: the Arabic ``قيم`` must not fire inside ``قيمة`` (value).
_HIGH_COMPLEXITY = re.compile(
    r"\b(?:analyze|compare|evaluate|critique|pros.and.cons|trade.?off"
    r"|قارن|حلل|قيم|عوامل|مزايا وعيوب|الفرق بين)\b",
    re.IGNORECASE,
)
_SIMPLE_QUESTION = re.compile(r"^(?:what is|who is|when|where|ما|من|متى|اين)\s+\w", re.IGNORECASE)
_KEYWORD = re.compile("[\\w\u0600-\u06ff]{2,}")

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|«([^»]+)»')
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.\w+)+")
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9_]*")


def normalize_query(query: str) -> str:
    """Drop Arabic diacritics (U+064B–U+0652), fold ``إأآ`` to ``ا``, collapse and strip spaces.

    Any run of Unicode whitespace becomes one ASCII space. Case is kept (matching lowercases
    where it needs to). ``""`` and all-whitespace input give ``""``.
    """
    without_marks = fold_arabic(query)
    return _SPACES.sub(" ", without_marks).strip()


def is_arabic_text(text: str) -> bool:
    """True when Arabic-block characters (U+0600–U+06FF) are ≥ 30 % of the non-space ones.

    The ratio is compared in integers, so exactly 30 % counts as Arabic. Text with no
    non-space characters is not Arabic.
    """
    # ``str.split()`` cuts at exactly the characters ``str.isspace()`` accepts.
    non_space = sum(map(len, text.split()))
    if non_space == 0:
        return False
    arabic = len(_ARABIC_CHAR.findall(text))
    return arabic * 10 >= non_space * 3


def _complexity(normalized: str) -> QueryComplexity:
    # The rules are ordered; the first one that fires decides.
    word_count = len(normalized.split())
    if _HIGH_COMPLEXITY.search(normalized):
        return QueryComplexity.HIGH
    if word_count > 20:
        return QueryComplexity.HIGH
    if _SIMPLE_QUESTION.match(normalized) and word_count <= 7:
        return QueryComplexity.LOW
    if word_count <= 12:
        return QueryComplexity.LOW
    return QueryComplexity.MEDIUM


def _intent(lowered: str) -> QueryIntent:
    best, best_count = QueryIntent.FACTUAL, 0
    for name, signals in INTENT_SIGNALS:
        count = sum(1 for signal in signals if signal in lowered)
        # Strictly greater: on a tie the intent listed earlier keeps the lead.
        if count > best_count:
            best, best_count = QueryIntent(name), count
    return best


def _keywords(lowered: str) -> tuple[str, ...]:
    counts = Counter(w for w in _KEYWORD.findall(lowered) if w not in STOP_WORDS)
    # Counter keeps first-occurrence order and sorted() is stable, so equal scores keep it.
    ranked = sorted(counts, key=lambda w: -counts[w] * (1 + 0.05 * len(w)))
    return tuple(ranked[:MAX_KEYWORDS])


def _question_type(lowered: str, is_arabic: bool) -> str:
    # Only the detected language's words count, by design (docs/design/analysis.md): "ما"
    # opening a mostly English query does not make it a wh-question, nor "is" an Arabic one a
    # yes/no.
    wh = ARABIC_WH_PREFIXES if is_arabic else ENGLISH_WH_PREFIXES
    yes_no = ARABIC_YES_NO_PREFIXES if is_arabic else ENGLISH_YES_NO_PREFIXES
    if lowered.startswith(wh):
        return "wh-question"
    if lowered.startswith(yes_no):
        return "yes/no"
    return "open"


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    # Blank out consumed spans (same length) so later patterns keep their offsets.
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def extract_entities(text: str) -> tuple[str, ...]:
    """Named things in ``text``, in order of appearance, each once (first spelling kept).

    Three rules, each applied to what the previous ones left:
    1. quoted phrases — the stripped content of ``"…"``, ``“…”`` or ``«…»``;
    2. dotted identifiers — ``os.path.join``, ``a.ops.agent`` (a letter or ``_`` first);
    3. capitalised words — an ASCII capital followed by letters, digits or ``_``
       (``Redis``, ``PostgreSQL``), except the text's very first word (sentence case, not a
       name) and English stop words (``The``, ``What``).
    Arabic has no letter case, so Arabic names are found only when quoted.
    """
    found: list[tuple[int, str]] = []
    spans: list[tuple[int, int]] = []
    for match in _QUOTED.finditer(text):
        phrase = next(g for g in match.groups() if g is not None).strip()
        spans.append(match.span())
        if phrase:
            found.append((match.start(), phrase))
    masked = _mask(text, spans)
    spans = []
    for match in _DOTTED.finditer(masked):
        spans.append(match.span())
        found.append((match.start(), match.group()))
    masked = _mask(masked, spans)
    first_word_start = len(text) - len(text.lstrip())
    for match in _CAPITALISED.finditer(masked):
        word = match.group()
        if match.start() != first_word_start and word.lower() not in ENGLISH_STOP_WORDS:
            found.append((match.start(), word))
    found.sort(key=lambda item: item[0])
    return tuple(dict.fromkeys(entity for _, entity in found))


class RuleBasedQueryAnalyzer:
    """Rule-based analysis of English and Arabic queries (docs/design/analysis.md); pure and
    thread-safe.

    ``analyze`` never raises on any ``str`` (empty, huge, mixed scripts, lone surrogates).
    """

    def __init__(self, config: AnalyzerConfig | None = None) -> None:
        self._config = config if config is not None else AnalyzerConfig()

    def budget_for(self, complexity: QueryComplexity) -> int:
        """The configured character budget for ``complexity`` (800 / 2000 / 4000 by default)."""
        if complexity is QueryComplexity.HIGH:
            return self._config.budget_high
        if complexity is QueryComplexity.MEDIUM:
            return self._config.budget_medium
        return self._config.budget_low

    def analyze(self, query: str) -> QueryAnalysis:
        """Analyse ``query``.

        - ``normalized``: see :func:`normalize_query`; every rule below reads it.
        - ``complexity``: the first rule that fires — HIGH on a word-bounded, case-insensitive
          analysis verb (``analyze|compare|evaluate|critique|pros.and.cons|trade.?off``,
          ``قارن|حلل|قيم|عوامل|مزايا وعيوب|الفرق بين``); HIGH when more than 20 words; LOW for
          ``what is|who is|when|where|ما|من|متى|اين`` + a word within 7 words; LOW up to 12
          words; else MEDIUM. Empty or blank query → LOW.
        - ``intent``: the intent with most signal phrases occurring as substrings of the
          lowercased normalised text; ties go to the earlier of factual, reasoning,
          comparative, procedural, code, summarize; no signal → factual. An empty or blank
          query (``query.strip() == ""``) → ``QueryIntent.UNKNOWN``, the only case that
          gives it.
        - ``keywords``: tokens ``[\\w\\u0600-\\u06FF]{2,}`` of the lowercased normalised text
          minus stop words, scored ``count * (1 + 0.05 * len)``, best 12, ties in first-seen
          order. The token class includes Arabic punctuation (``،`` ``؟``), so a word written
          against it keeps it, as the pattern says.
        - ``question_type``: ``wh-question`` / ``yes/no`` / ``open`` by plain ``startswith``
          (so ``"island…"`` counts as ``yes/no``, docs/design/analysis.md), against the detected
          language's words only: ``ما|من|متى|اين|كيف|لماذا|كم`` and ``هل`` for an Arabic
          query, the English words for any other. An empty or blank query → ``""``.
        - ``is_arabic`` / ``language``: :func:`is_arabic_text` on the normalised text;
          ``"ar"`` or ``"en"``.
        - ``entities``: :func:`extract_entities` on the normalised text.
        - ``context_budget``: the configured budget for the complexity.

        A query longer than ``ANALYSED_QUERY_CHARS`` (16,384) characters is analysed on its
        ``analysed_part`` alone; ``original_query`` is still the whole query.
        """
        normalized = normalize_query(analysed_part(query))
        lowered = normalized.lower()
        complexity = _complexity(normalized)
        is_arabic = is_arabic_text(normalized)
        # Judged on the query as given, by design (docs/design/analysis.md): a query of Arabic
        # diacritics alone is not blank, though nothing of it is left once normalised.
        blank = not query.strip()
        return QueryAnalysis(
            original_query=query,
            normalized=normalized,
            intent=QueryIntent.UNKNOWN if blank else _intent(lowered),
            complexity=complexity,
            keywords=_keywords(lowered),
            entities=extract_entities(normalized),
            is_arabic=is_arabic,
            language="ar" if is_arabic else "en",
            question_type="" if blank else _question_type(lowered, is_arabic),
            context_budget=self.budget_for(complexity),
        )


# --------------------------------------------------------------------------------------------
# Splitting one budget over several queries
# --------------------------------------------------------------------------------------------


class BudgetAllocationStrategy(ABC):
    """Splits ``total_budget`` (characters) over ``n_queries`` queries.

    Contract for every strategy: ``n_queries <= 0`` → ``[]``; otherwise exactly
    ``n_queries`` integers summing to ``total_budget`` (the rounding remainder, positive or
    negative, goes to the first query). Never raises except where a subclass documents it.
    """

    @abstractmethod
    def allocate(self, total_budget: int, n_queries: int) -> list[int]:
        """Return the per-query budgets, in query order."""


def _remainder_to_first(total_budget: int, budgets: list[int]) -> list[int]:
    budgets[0] += total_budget - sum(budgets)
    return budgets


class EqualBudgetAllocation(BudgetAllocationStrategy):
    """``total // n`` each, the remainder to the first: 1000 over 3 → ``[334, 333, 333]``.

    A total smaller than ``n`` leaves zeros (2 over 3 → ``[2, 0, 0]``); a negative total is
    split the same way (floor division), so the sum is always the total.
    """

    def allocate(self, total_budget: int, n_queries: int) -> list[int]:
        if n_queries <= 0:
            return []
        return _remainder_to_first(total_budget, [total_budget // n_queries] * n_queries)


class WeightedBudgetAllocation(BudgetAllocationStrategy):
    """Each query gets ``max(1, int(total * w / sum(weights)))``, the remainder to the first.

    Raises ``ValueError("weights length must equal n_queries.")`` when ``len(weights) !=
    n_queries`` (checked only for ``n_queries >= 1``; ``n_queries <= 0`` → ``[]``). A zero
    weight sum is treated as 1.0. A share that is not a finite number (NaN or infinite
    weights, or a total too large for a float) counts as 0 and so becomes 1.

    The floor of 1 can hand out more than the total; the excess is then taken from the first
    query, which can drop below 1 when its own weight is tiny (weights ``[0, 1, 1]`` over 4 →
    ``[0, 2, 2]``). Weights are expected to be non-negative; negative ones are not refused
    and give meaningless shares, though the sum is still the total.
    """

    def __init__(self, weights: Sequence[float]) -> None:
        self.weights: tuple[float, ...] = tuple(weights)

    def allocate(self, total_budget: int, n_queries: int) -> list[int]:
        if n_queries <= 0:
            return []
        if len(self.weights) != n_queries:
            raise ValueError("weights length must equal n_queries.")
        weight_sum = sum(self.weights) or 1.0
        budgets = [max(1, _share(total_budget, w, weight_sum)) for w in self.weights]
        return _remainder_to_first(total_budget, budgets)


def _share(total_budget: int, weight: float, weight_sum: float) -> int:
    try:
        share = total_budget * weight / weight_sum
    except (OverflowError, ZeroDivisionError):
        return 0
    return int(share) if math.isfinite(share) else 0


class ComplexityBasedAllocation(BudgetAllocationStrategy):
    """Weighted split with weights LOW 1.0, MEDIUM 1.5, HIGH 2.5 taken from ``analyses``.

    ``analyses`` missing, or not exactly ``n_queries`` long, falls back to
    :class:`EqualBudgetAllocation` and logs a WARNING (docs/decisions/0010).
    ``n_queries <= 0`` → ``[]`` without a warning. Never raises.
    """

    WEIGHTS: Final = {
        QueryComplexity.LOW: 1.0,
        QueryComplexity.MEDIUM: 1.5,
        QueryComplexity.HIGH: 2.5,
    }

    def allocate(
        self,
        total_budget: int,
        n_queries: int,
        analyses: Sequence[QueryAnalysis] | None = None,
    ) -> list[int]:
        if n_queries <= 0:
            return []
        if analyses is None or len(analyses) != n_queries:
            logger.warning(
                "complexity-based allocation needs one analysis per query "
                "(got %s for %d queries); splitting the budget equally",
                "none" if analyses is None else len(analyses),
                n_queries,
            )
            return EqualBudgetAllocation().allocate(total_budget, n_queries)
        weights = [self.WEIGHTS[a.complexity] for a in analyses]
        return WeightedBudgetAllocation(weights).allocate(total_budget, n_queries)
