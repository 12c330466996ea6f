"""Differential test: the analyzer against its documented behaviour (docs/design/analysis.md).

Two rules are checked here against a reference written from the design document's words alone, not
from the analyzer's code:
- ``question_type`` looks only at the detected language's list: an Arabic query (Arabic-block
  characters ≥ 30 % of the non-space ones, after normalising) against ``ما من متى اين كيف
  لماذا كم`` / ``هل``, any other query against the English words; plain ``startswith`` on the
  lowercased normalised text.
- an empty or blank query has intent ``unknown``, question_type ``""`` and complexity LOW.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore import QueryComplexity, QueryIntent, RuleBasedQueryAnalyzer
from contextstore.sample_data import load_demo_queries

ENGLISH_WH = ("what", "who", "when", "where", "how", "why", "which")
ENGLISH_YES_NO = ("is", "are", "was", "were", "do", "does", "did", "can", "could", "will")
ARABIC_WH = ("ما", "من", "متى", "اين", "كيف", "لماذا", "كم")
ARABIC_YES_NO = ("هل",)


def reference_normalise(query: str) -> str:
    """docs/design/analysis.md: strip, drop U+064B–U+0652, fold إأآ to ا, collapse spaces."""
    text = "".join(ch for ch in query if not "\u064b" <= ch <= "\u0652")
    text = text.translate(str.maketrans("إأآ", "ااا"))
    return re.sub(r"\s+", " ", text).strip()


def reference_is_arabic(normalised: str) -> bool:
    """docs/design/analysis.md: Arabic-block characters / non-space characters ≥ 0.3."""
    non_space = [ch for ch in normalised if not ch.isspace()]
    arabic = [ch for ch in non_space if "\u0600" <= ch <= "\u06ff"]
    return bool(non_space) and len(arabic) / len(non_space) >= 0.3


def reference_question_type(query: str) -> str:
    if not query.strip():
        return ""
    lowered = reference_normalise(query).lower()
    arabic = reference_is_arabic(reference_normalise(query))
    wh, yes_no = (ARABIC_WH, ARABIC_YES_NO) if arabic else (ENGLISH_WH, ENGLISH_YES_NO)
    if any(lowered.startswith(word) for word in wh):
        return "wh-question"
    if any(lowered.startswith(word) for word in yes_no):
        return "yes/no"
    return "open"


analyzer = RuleBasedQueryAnalyzer()


# What the documented rules give for each, worked out by hand from the rules above.
DOCUMENTED = [
    ("What is RAG?", "wh-question"),
    ("how do I deploy", "wh-question"),
    ("Can you help", "yes/no"),
    ("island hopping", "yes/no"),  # plain startswith: "is…"
    ("whatever happens", "wh-question"),  # plain startswith: "what…"
    ("tell me about Redis", "open"),
    ("ما هو التعلم الآلي", "wh-question"),
    ("كيف أبدأ", "wh-question"),
    ("هل تمطر اليوم", "yes/no"),
    ("اشرح الفكرة", "open"),
    # Mixed scripts: only the detected language's list counts.
    ("ما is the meaning of this long English sentence", "open"),  # English: "ما" ignored
    ("who هل تمطر اليوم في المدينة", "open"),  # Arabic: "who" ignored
    ("is ما هو التعلم", "open"),  # Arabic: "is" ignored
    ("هل you know", "open"),  # 2 Arabic characters of 9 non-space: English, "هل" ignored
    ("do هل", "open"),  # 2 of 4: Arabic, and "do" is not an Arabic word
    ("do you know هل", "yes/no"),  # 2 of 11: English
    ("\u064bهل تمطر", "yes/no"),  # the diacritic is dropped before startswith
    ("أين المكتب", "wh-question"),  # أ folds to ا: "اين"
]


@pytest.mark.parametrize(("query", "kind"), DOCUMENTED)
def test_question_type_matches_the_documented_cases(query: str, kind: str) -> None:
    assert reference_question_type(query) == kind
    assert analyzer.analyze(query).question_type == kind


@pytest.mark.parametrize("query", ["", " ", "\t\n", "\u00a0\u2003", "\u3000 \r\n"])
def test_a_blank_query_is_unknown_with_no_question_type(query: str) -> None:
    result = analyzer.analyze(query)
    assert result.intent is QueryIntent.UNKNOWN
    assert result.question_type == ""
    assert result.complexity is QueryComplexity.LOW
    assert result.context_budget == 800


def test_unknown_is_the_intent_of_blank_queries_only() -> None:
    for item in load_demo_queries():
        result = analyzer.analyze(item.query)
        assert result.intent is not QueryIntent.UNKNOWN
        assert result.question_type == reference_question_type(item.query)


WORDS = [
    *ENGLISH_WH,
    *ENGLISH_YES_NO,
    *ARABIC_WH,
    *ARABIC_YES_NO,
    "island",
    "whatever",
    "the",
    "Redis",
    "cluster",
    "failover",
    "التعلم",
    "الآلي",
    "أين",
    "إدارة",
    "قيّم",
    "المكتب",
    "?",
    "؟",
    "42",
]
SPACES = st.sampled_from([" ", "  ", "\t", "\n", "\u00a0", "\u3000"])


@st.composite
def queries(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), max_size=8))
    parts = [draw(SPACES)] if draw(st.booleans()) else []
    for word in words:
        if draw(st.booleans()):
            word = word.upper() if word.isascii() else word + "\u064e"
        parts += [word, draw(SPACES)]
    return "".join(parts)


@settings(max_examples=500, deadline=None)
@given(query=queries() | st.text(max_size=30))
def test_question_type_and_blank_intent_agree_with_the_reference(query: str) -> None:
    result = analyzer.analyze(query)
    assert result.question_type == reference_question_type(query)
    assert result.is_arabic == reference_is_arabic(reference_normalise(query))
    blank = not query.strip()
    assert (result.intent is QueryIntent.UNKNOWN) == blank
    if blank:
        assert (result.complexity, result.question_type) == (QueryComplexity.LOW, "")
