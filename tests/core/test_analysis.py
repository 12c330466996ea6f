"""RuleBasedQueryAnalyzer and the budget allocators (docs/design/analysis.md)."""

from __future__ import annotations

import logging

import pytest

from contextstore.config import AnalyzerConfig
from contextstore.core.analysis import (
    BudgetAllocationStrategy,
    ComplexityBasedAllocation,
    EqualBudgetAllocation,
    QueryAnalysis,
    QueryComplexity,
    QueryIntent,
    RuleBasedQueryAnalyzer,
    WeightedBudgetAllocation,
    extract_entities,
    is_arabic_text,
    normalize_query,
)

LOW, MEDIUM, HIGH = QueryComplexity.LOW, QueryComplexity.MEDIUM, QueryComplexity.HIGH


@pytest.fixture
def analyzer() -> RuleBasedQueryAnalyzer:
    return RuleBasedQueryAnalyzer()


def words(n: int) -> str:
    """``n`` distinct plain words that trigger no complexity rule."""
    return " ".join(f"word{i}" for i in range(n))


# --- normalisation and language --------------------------------------------------------------


def test_normalisation_strips_diacritics_folds_alef_and_collapses_spaces() -> None:
    assert normalize_query("  مُحَمَّدٌ  \t\n إلى   أين  آخر ") == "محمد الى اين اخر"


def test_normalisation_keeps_case_and_other_letters() -> None:
    assert normalize_query("What  IS\u00a0Redis?") == "What IS Redis?"
    assert normalize_query("") == ""
    assert normalize_query(" \t\n ") == ""


def test_arabic_ratio_boundary_is_inclusive_at_thirty_percent() -> None:
    assert is_arabic_text("abcdefg بتث")  # 3 of 10 non-space characters
    assert not is_arabic_text("abcdefgh بتث")  # 3 of 11
    assert not is_arabic_text("")
    assert not is_arabic_text("   ")


def test_language_follows_the_ratio(analyzer: RuleBasedQueryAnalyzer) -> None:
    arabic = analyzer.analyze("ما هو التعلم الآلي")
    assert (arabic.is_arabic, arabic.language) == (True, "ar")
    english = analyzer.analyze("what is machine learning")
    assert (english.is_arabic, english.language) == (False, "en")


# --- complexity and budget -------------------------------------------------------------------


def test_empty_query_is_low_with_the_low_budget(analyzer: RuleBasedQueryAnalyzer) -> None:
    for query in ("", "   ", "\t\n\u3000"):
        result = analyzer.analyze(query)
        assert result.complexity is LOW
        assert result.context_budget == 800
        assert result.normalized == ""
        assert result.original_query == query
        assert result.intent is QueryIntent.UNKNOWN
        assert result.question_type == ""
        assert (result.keywords, result.entities) == ((), ())
        assert (result.is_arabic, result.language) == (False, "en")


def test_only_a_blank_query_has_the_unknown_intent(analyzer: RuleBasedQueryAnalyzer) -> None:
    # Diacritics alone are not blank as given, though nothing is left of them once normalised.
    diacritics = analyzer.analyze("\u064b\u0650")
    assert diacritics.normalized == ""
    assert (diacritics.intent, diacritics.question_type) == (QueryIntent.FACTUAL, "open")
    assert analyzer.analyze(".").intent is QueryIntent.FACTUAL


@pytest.mark.parametrize(
    "query",
    [
        "analyze this",
        "Compare A with B",
        "EVALUATE the plan",
        "critique my essay",
        "pros and cons of tea",
        "pros-and-cons",
        "the tradeoff here",
        "a trade-off here",
        "trade off",
        "قارن بين الشاي والقهوة",
        "حلل النص",
        "عوامل النجاح",
        "مزايا وعيوب العمل عن بعد",
        "ما الفرق بين القط والكلب",
    ],
)
def test_analysis_verbs_are_high(analyzer: RuleBasedQueryAnalyzer, query: str) -> None:
    result = analyzer.analyze(query)
    assert result.complexity is HIGH
    assert result.context_budget == 4000


def test_shadda_in_qayyim_is_normalised_away_and_fires_high(
    analyzer: RuleBasedQueryAnalyzer,
) -> None:
    result = analyzer.analyze("قيّم الخطة")
    assert result.normalized == "قيم الخطة"
    assert result.complexity is HIGH


def test_analysis_verbs_are_word_bounded(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze("the analyzer compared").complexity is LOW
    assert analyzer.analyze("قيمة المنزل").complexity is LOW  # "value", not "evaluate"


def test_word_count_rules(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze(words(21)).complexity is HIGH
    assert analyzer.analyze(words(20)).complexity is MEDIUM
    assert analyzer.analyze(words(13)).complexity is MEDIUM
    assert analyzer.analyze(words(13)).context_budget == 2000
    assert analyzer.analyze(words(12)).complexity is LOW
    assert analyzer.analyze(words(1)).complexity is LOW


def test_simple_questions_are_low(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze("what is X").complexity is LOW
    assert analyzer.analyze("متى بدأت الحرب").complexity is LOW


def test_high_rule_wins_over_word_count(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze("what is compare").complexity is HIGH


def test_budgets_come_from_config() -> None:
    custom = RuleBasedQueryAnalyzer(AnalyzerConfig(budget_low=1, budget_medium=2, budget_high=3))
    assert custom.analyze("hi").context_budget == 1
    assert custom.analyze(words(13)).context_budget == 2
    assert custom.analyze("compare").context_budget == 3


# --- intent ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("", QueryIntent.UNKNOWN),
        ("tell me a story", QueryIntent.FACTUAL),
        ("who wrote it", QueryIntent.FACTUAL),
        ("why is the sky blue", QueryIntent.REASONING),
        ("contrast tea versus coffee", QueryIntent.COMPARATIVE),
        ("steps of the procedure", QueryIntent.PROCEDURAL),
        ("a script snippet", QueryIntent.CODE),
        ("summary overview please", QueryIntent.SUMMARIZE),
        ("لخص المقال باختصار", QueryIntent.SUMMARIZE),
        ("اشرح ووضح الفكرة", QueryIntent.REASONING),
    ],
)
def test_intent_is_the_largest_signal_count(
    analyzer: RuleBasedQueryAnalyzer, query: str, intent: QueryIntent
) -> None:
    assert analyzer.analyze(query).intent is intent


def test_intent_tie_goes_to_the_earlier_intent(analyzer: RuleBasedQueryAnalyzer) -> None:
    # one reasoning signal (explain) and one code signal (snippet)
    assert analyzer.analyze("explain this snippet").intent is QueryIntent.REASONING
    # one comparative (better) and one summarize (summary): comparative is listed first
    assert analyzer.analyze("a better summary").intent is QueryIntent.COMPARATIVE


def test_intent_counts_signals_not_occurrences(analyzer: RuleBasedQueryAnalyzer) -> None:
    # "code" three times is one code signal; "script" + "snippet" are two code signals
    assert analyzer.analyze("explain why code code code").intent is QueryIntent.REASONING
    assert analyzer.analyze("explain script snippet").intent is QueryIntent.CODE


def test_intent_matches_substrings_case_insensitively(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze("SUMMARIZE").intent is QueryIntent.SUMMARIZE
    assert analyzer.analyze("reasonable").intent is QueryIntent.REASONING


# --- keywords --------------------------------------------------------------------------------


def test_keywords_exact_list(analyzer: RuleBasedQueryAnalyzer) -> None:
    result = analyzer.analyze(
        "How do I compare Redis and PostgreSQL caching, and Redis clustering?"
    )
    # redis 2*1.25, postgresql and clustering 1.5, compare and caching 1.35 (first seen first)
    assert result.keywords == ("redis", "postgresql", "clustering", "compare", "caching")


def test_keywords_keep_at_most_twelve_in_first_seen_order_on_ties(
    analyzer: RuleBasedQueryAnalyzer,
) -> None:
    query = " ".join(f"k{c}{c}" for c in "abcdefghijklmn")  # 14 three-letter words
    assert analyzer.analyze(query).keywords == tuple(f"k{c}{c}" for c in "abcdefghijkl")


def test_keywords_drop_stop_words_and_single_characters(analyzer: RuleBasedQueryAnalyzer) -> None:
    assert analyzer.analyze("a b the of في من x").keywords == ()
    assert analyzer.analyze("ما هو التعلم").keywords == ("التعلم",)


# --- question type ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("What is this", "wh-question"),
        ("how come", "wh-question"),
        ("Which one", "wh-question"),
        ("لماذا السماء زرقاء", "wh-question"),
        ("كم عمرك", "wh-question"),
        ("Is it raining", "yes/no"),
        ("could you help", "yes/no"),
        ("هل تمطر", "yes/no"),
        ("tell me", "open"),
        ("", ""),
        ("island hopping", "yes/no"),  # plain startswith, as documented
        ("ما is the answer", "open"),  # an English query: the Arabic words do not count
        ("is ما هو التعلم", "open"),  # an Arabic query: the English words do not count
        ("what هل تمطر اليوم", "open"),
        ("هل what", "yes/no"),  # Arabic by the 30 % rule
    ],
)
def test_question_type(analyzer: RuleBasedQueryAnalyzer, query: str, kind: str) -> None:
    assert analyzer.analyze(query).question_type == kind


# --- entities --------------------------------------------------------------------------------


def test_entities_quoted_dotted_and_capitalised_in_order() -> None:
    text = 'Tell me about "New York" and os.path.join with Redis, Redis and The end'
    assert extract_entities(text) == ("New York", "os.path.join", "Redis")


def test_entities_skip_the_first_word_and_find_arabic_only_when_quoted() -> None:
    assert extract_entities("Redis vs Memcached") == ("Memcached",)
    assert extract_entities("من هو «ابن سينا»") == ("ابن سينا",)
    assert extract_entities("") == ()


def test_analysis_is_a_frozen_record(analyzer: RuleBasedQueryAnalyzer) -> None:
    result = analyzer.analyze("What is Redis")
    assert isinstance(result, QueryAnalysis)
    assert result.entities == ("Redis",)
    with pytest.raises(AttributeError):
        result.complexity = HIGH  # type: ignore[misc]


# --- allocators ------------------------------------------------------------------------------


def test_strategies_share_a_base() -> None:
    for strategy in (
        EqualBudgetAllocation(),
        WeightedBudgetAllocation([1.0]),
        ComplexityBasedAllocation(),
    ):
        assert isinstance(strategy, BudgetAllocationStrategy)


def test_equal_split_gives_the_remainder_to_the_first() -> None:
    assert EqualBudgetAllocation().allocate(1000, 3) == [334, 333, 333]
    assert EqualBudgetAllocation().allocate(900, 3) == [300, 300, 300]
    assert EqualBudgetAllocation().allocate(2, 3) == [2, 0, 0]


@pytest.mark.parametrize("n", [0, -1, -100])
def test_non_positive_query_counts_give_empty_lists(n: int) -> None:
    assert EqualBudgetAllocation().allocate(1000, n) == []
    assert WeightedBudgetAllocation([]).allocate(1000, n) == []
    assert WeightedBudgetAllocation([1.0, 2.0]).allocate(1000, n) == []
    assert ComplexityBasedAllocation().allocate(1000, n) == []


def test_weighted_split_is_exact() -> None:
    assert WeightedBudgetAllocation([1, 2, 1]).allocate(1000, 3) == [250, 500, 250]
    assert WeightedBudgetAllocation([1, 1, 1]).allocate(1000, 3) == [334, 333, 333]


def test_weighted_zero_sum_counts_as_one() -> None:
    # each share is int(10 * 0 / 1.0) = 0, floored to 1; the remainder goes to the first
    assert WeightedBudgetAllocation([0, 0, 0]).allocate(10, 3) == [8, 1, 1]


def test_weighted_gives_each_query_at_least_one() -> None:
    budgets = WeightedBudgetAllocation([1000, 1, 1, 1]).allocate(10, 4)
    assert budgets == [7, 1, 1, 1]
    assert all(b >= 1 for b in budgets)


def test_weighted_floor_excess_comes_out_of_the_first() -> None:
    assert WeightedBudgetAllocation([0, 1, 1]).allocate(4, 3) == [0, 2, 2]


def test_weighted_length_mismatch_raises_exact_message() -> None:
    with pytest.raises(ValueError) as info:
        WeightedBudgetAllocation([1.0, 2.0]).allocate(1000, 3)
    assert str(info.value) == "weights length must equal n_queries."


def test_weighted_non_finite_weights_do_not_raise() -> None:
    budgets = WeightedBudgetAllocation([float("nan"), 1.0]).allocate(100, 2)
    assert len(budgets) == 2 and sum(budgets) == 100
    budgets = WeightedBudgetAllocation([float("inf"), 1.0]).allocate(100, 2)
    assert sum(budgets) == 100


def _analysis(complexity: QueryComplexity) -> QueryAnalysis:
    return QueryAnalysis("q", "q", QueryIntent.FACTUAL, complexity, (), (), False, "en", "open", 0)


def test_complexity_based_uses_complexity_weights() -> None:
    analyses = [_analysis(LOW), _analysis(MEDIUM), _analysis(HIGH)]
    # weights 1 : 1.5 : 2.5 of 1000 → 200, 300, 500
    assert ComplexityBasedAllocation().allocate(1000, 3, analyses) == [200, 300, 500]


def test_complexity_based_takes_the_floors_excess_from_the_first_query() -> None:
    # Nine LOW and one HIGH over 10: the shares 0.87 (floored to 1) and 2.17 (2) hand out
    # 11, and the first query gives back the excess, as the documented remainder rule does.
    analyses = [_analysis(LOW)] * 9 + [_analysis(HIGH)]
    assert ComplexityBasedAllocation().allocate(10, 10, analyses) == [0, *[1] * 8, 2]


@pytest.mark.parametrize("analyses", [None, [], [_analysis(HIGH)]])
def test_complexity_based_falls_back_to_equal_with_a_warning(
    caplog: pytest.LogCaptureFixture, analyses: list[QueryAnalysis] | None
) -> None:
    with caplog.at_level(logging.WARNING, logger="contextstore.core.analysis"):
        budgets = ComplexityBasedAllocation().allocate(1000, 3, analyses)
    assert budgets == EqualBudgetAllocation().allocate(1000, 3) == [334, 333, 333]
    records = [r for r in caplog.records if r.name == "contextstore.core.analysis"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert "equally" in records[0].getMessage()


def test_complexity_based_with_matching_analyses_does_not_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="contextstore.core.analysis"):
        ComplexityBasedAllocation().allocate(10, 1, [_analysis(LOW)])
    assert not caplog.records
