"""Word tables for the rule-based query analyzer (English and Arabic). docs/design/analysis.md.

Every Arabic entry is written in *normalised* form (no diacritics, ``إأآ`` folded to ``ا``)
because the analyzer only ever matches against normalised text; an entry spelled with a hamza
or a shadda here would never match.
"""

from __future__ import annotations

from typing import Final


def _phrases(*groups: str) -> tuple[str, ...]:
    """``_phrases("a|b c", "d")`` → ``("a", "b c", "d")``; one group per script, for reading."""
    return tuple(phrase.strip() for group in groups for phrase in group.split("|"))


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Intent signals keyed by ``QueryIntent`` value (plain strings so this table does not import
# the analyzer), in tie-break order: when two intents count the same number of signals the one
# listed first wins. Matched as plain substrings of the lowercased normalised query.
INTENT_SIGNALS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "factual",
        _phrases(
            "what|who|when|where|which|how many|how much",
            "ما|من|متى|اين|كم|ما هو|ما هي|من هو|من هي",
        ),
    ),
    (
        "reasoning",
        _phrases(
            "why|how|explain|describe|elaborate|analyze|reason",
            "لماذا|كيف|ما سبب|اشرح|وضح|فسر",
        ),
    ),
    (
        "comparative",
        _phrases(
            "compare|difference|versus|vs|better|worse|contrast",
            "قارن|الفرق|ايهما|افضل|مقارنة|مقابل",
        ),
    ),
    (
        "procedural",
        _phrases(
            "how to|steps|procedure|process|guide|tutorial|implement",
            "كيفية|خطوات|طريقة|الية",
        ),
    ),
    (
        "code",
        _phrases("code|function|class|implement|script|program|snippet", "كود|برمجة|دالة|برمج"),
    ),
    (
        "summarize",
        _phrases("summarize|summary|overview|briefly|tldr|main points", "لخص|ملخص|باختصار"),
    ),
)

# Prefixes for ``question_type`` (plain ``startswith`` on the lowercased normalised text), one
# table per language: a query is checked against its detected language's words only.
ENGLISH_WH_PREFIXES: Final[tuple[str, ...]] = _phrases("what|who|when|where|how|why|which")
ENGLISH_YES_NO_PREFIXES: Final[tuple[str, ...]] = _phrases(
    "is|are|was|were|do|does|did|can|could|will"
)
ARABIC_WH_PREFIXES: Final[tuple[str, ...]] = _phrases("ما|من|متى|اين|كيف|لماذا|كم")
ARABIC_YES_NO_PREFIXES: Final[tuple[str, ...]] = _phrases("هل")

# Small on purpose: only words that carry no topic. Single letters never reach this table
# because keywords need two or more characters.
ENGLISH_STOP_WORDS: Final[frozenset[str]] = _words(
    """
    a an the and or but if then else of to in on at by for from with without about into over
    under between through during before after above below up down out off again further
    is are was were be been being am do does did doing have has had having can could will
    would shall should may might must i me my we our you your he him his she her it its they
    them their this that these those there here what which who whom whose when where why how
    not no nor so than too very just also only own same such both each few more most other
    some any all as don isn aren wasn weren
    """
)
ARABIC_STOP_WORDS: Final[frozenset[str]] = _words(
    """
    في من الى على عن مع ما هل هو هي هم هن انا نحن انت انتم ان او ثم قد لا لم لن كل بين عند
    هذا هذه ذلك تلك هؤلاء التي الذي الذين كان كانت يكون كيف متى اين لماذا ماذا كم اي ايضا
    حتى لكن بل اذا لقد منذ حول عبر غير بعد قبل فوق تحت
    """
)
STOP_WORDS: Final[frozenset[str]] = ENGLISH_STOP_WORDS | ARABIC_STOP_WORDS
