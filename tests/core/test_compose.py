"""filter_chunks, rank_chunks, compose_context (docs/design/composition.md)."""

from __future__ import annotations

import pytest

from contextstore.config import TEMPLATES, ContextEngineConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.compose import (
    TEMPLATE_TEXTS,
    Chunk,
    ComposedContext,
    compose_context,
    filter_chunks,
    hard_truncate,
    is_noise,
    rank_chunks,
)
from contextstore.core.guard import ContextGuard
from contextstore.errors import ConfigurationError

LONG = "This sentence is comfortably longer than twenty characters."
REDIS = Chunk("Redis keeps data in memory.", "docs/redis.md", 0.9)
PG = Chunk("  PostgreSQL stores rows on disk.  ", "docs/pg.md", 0.5)
MARKER_S = len("[Source: s]\n")  # 12


def texts(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


# --- filter ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t ",
        "..........",
        "-----\n*****\n_____",
        "- - - - - - - - - - - - - - - - - - - - -",
        "Contents ........................ 12",
        "Page 12",
        "page 3 of 10",
        "  PAGE 4  \n\n page 5",
        "صفحة 7",
    ],
)
def test_noise_is_recognised(text: str) -> None:
    assert is_noise(text)


@pytest.mark.parametrize(
    "text",
    [
        LONG,
        "A paragraph with a rule\n-----\nand more text after the rule here.",
        "See page 12 for the details of the install.",
        "Version 1.2.3 ... and then some",
    ],
)
def test_real_text_is_not_noise(text: str) -> None:
    assert not is_noise(text)


def test_filter_drops_noise_and_keeps_order_and_text_unchanged() -> None:
    chunks = [
        Chunk("  " + LONG + "  ", "a"),
        Chunk("Page 12", "b"),
        Chunk("=" + "-" * 40, "c"),
        Chunk("Another perfectly fine chunk of text.", "d"),
    ]
    kept = filter_chunks(chunks, min_length=1)
    assert [c.source for c in kept] == ["a", "d"]
    assert kept[0] is chunks[0]


def test_filter_length_window_is_inclusive_on_the_stripped_text() -> None:
    chunks = [
        Chunk("x" * 19, "short"),
        Chunk("  " + "y" * 20 + "  ", "min"),
        Chunk("z" * 4000, "max"),
        Chunk("w" * 4001, "long"),
    ]
    assert [c.source for c in filter_chunks(chunks)] == ["min", "max"]
    assert [c.source for c in filter_chunks(chunks, min_length=0, max_length=19)] == ["short"]


def test_filter_drops_duplicates_by_lowercased_space_collapsed_text_first_kept() -> None:
    chunks = [
        Chunk("Redis keeps   data in memory.", "first", 0.1),
        Chunk("redis keeps data\nin MEMORY.", "second", 0.9),
        Chunk("Redis keeps data in memory!", "different", 0.5),
        Chunk("  REDIS KEEPS DATA IN MEMORY.  ", "third", 1.0),
    ]
    assert [c.source for c in filter_chunks(chunks)] == ["first", "different"]


def test_filter_of_nothing_is_nothing() -> None:
    assert filter_chunks([]) == []


# --- rank ------------------------------------------------------------------------------------


def test_rank_is_score_descending_and_stable() -> None:
    chunks = [Chunk(f"t{i}", f"s{i}", score) for i, score in enumerate([0.5, 0.9, 0.5, 0.1, 0.9])]
    assert [c.source for c in rank_chunks(chunks)] == ["s1", "s4", "s0", "s2", "s3"]


def test_rank_puts_nan_scores_last() -> None:
    chunks = [Chunk("a", "nan", float("nan")), Chunk("b", "low", -5.0), Chunk("c", "hi", 1.0)]
    assert [c.source for c in rank_chunks(chunks)] == ["hi", "low", "nan"]


def test_rank_breaks_score_ties_by_keyword_overlap_only() -> None:
    analysis = RuleBasedQueryAnalyzer().analyze("redis memory eviction")
    chunks = [
        Chunk("nothing relevant", "none", 0.5),
        Chunk("Redis memory", "two", 0.5),
        Chunk("redis", "one", 0.5),
        Chunk("unrelated but better scored", "top", 0.6),
    ]
    assert [c.source for c in rank_chunks(chunks, analysis)] == ["top", "two", "one", "none"]
    assert [c.source for c in rank_chunks(chunks)] == ["top", "none", "two", "one"]


# --- compose ---------------------------------------------------------------------------------


def test_minimal_format_byte_for_byte() -> None:
    result = compose_context([REDIS, PG], 1000, "minimal")
    assert result == ComposedContext(
        text=(
            "[Source: docs/redis.md]\nRedis keeps data in memory."
            "\n---\n"
            "[Source: docs/pg.md]\nPostgreSQL stores rows on disk."
        ),
        chunks_used=(REDIS, PG),
        truncated=False,
    )


def test_english_is_the_default_template() -> None:
    assert compose_context([REDIS], 1000) == compose_context([REDIS], 1000, "english")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            "english",
            "Use the following information to answer the question.\n\n"
            "[Source: docs/redis.md]\nRedis keeps data in memory.\n---\n"
            "[Source: docs/pg.md]\nPostgreSQL stores rows on disk.\n\n"
            "If the information above does not answer the question, say so.",
        ),
        (
            "arabic",
            "استخدم المعلومات التالية للإجابة عن السؤال.\n\n"
            "[المصدر: docs/redis.md]\nRedis keeps data in memory.\n---\n"
            "[المصدر: docs/pg.md]\nPostgreSQL stores rows on disk.\n\n"
            "إذا كانت المعلومات أعلاه لا تجيب عن السؤال، فاذكر ذلك.",
        ),
        (
            "minimal",
            "[Source: docs/redis.md]\nRedis keeps data in memory.\n---\n"
            "[Source: docs/pg.md]\nPostgreSQL stores rows on disk.",
        ),
        (
            "structured",
            "## Context\n\n"
            "[Source: docs/redis.md]\nRedis keeps data in memory.\n---\n"
            "[Source: docs/pg.md]\nPostgreSQL stores rows on disk.\n\n"
            "## End of context",
        ),
    ],
)
def test_each_template_output(template: str, expected: str) -> None:
    result = compose_context([REDIS, PG], 1000, template)
    assert result.text == expected
    assert result.chunks_used == (REDIS, PG)
    # every template cites in a way the guard accepts
    assert ContextGuard(ContextEngineConfig()).validate(result.text, "q") == (True, [])


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("english", "No relevant information was found."),
        ("arabic", "لم يتم العثور على معلومات ذات صلة."),
        ("minimal", "No relevant information was found."),
        ("structured", "## Context\n\nNo relevant information was found."),
    ],
)
def test_no_chunks_gives_the_no_information_text(template: str, text: str) -> None:
    assert compose_context([], 1000, template) == ComposedContext(text, (), False)


def test_templates_match_the_config_list() -> None:
    assert tuple(TEMPLATE_TEXTS) == TEMPLATES


def test_unknown_template_is_a_configuration_error_naming_template() -> None:
    with pytest.raises(ConfigurationError, match=r"^template: unknown template 'klingon'"):
        compose_context([REDIS], 1000, "klingon")
    with pytest.raises(ConfigurationError, match="template"):
        compose_context([], 0, "")


def test_budget_covers_header_and_footer() -> None:
    full = compose_context([REDIS], 1000).text
    assert compose_context([REDIS], len(full)).text == full
    shorter = compose_context([REDIS], len(full) - 1)
    assert shorter.truncated is True
    assert len(shorter.text) <= len(full) - 1


def test_stops_at_the_first_chunk_that_does_not_fit() -> None:
    small_a = Chunk("a" * 10, "a")
    big = Chunk("b" * 100, "b")
    small_c = Chunk("c" * 10, "c")
    budget = len("[Source: a]\n" + "a" * 10 + "\n---\n" + "[Source: c]\n" + "c" * 10)
    result = compose_context([small_a, big, small_c], budget, "minimal")
    assert result.text == "[Source: a]\naaaaaaaaaa"
    assert result.chunks_used == (small_a,)
    assert result.truncated is False


def test_separator_counts_against_the_budget() -> None:
    one, two = Chunk("x" * 10, "s"), Chunk("y" * 10, "s")
    exact = MARKER_S * 2 + 20 + len("\n---\n")
    assert compose_context([one, two], exact, "minimal").chunks_used == (one, two)
    assert compose_context([one, two], exact - 1, "minimal").chunks_used == (one,)


def test_hard_truncation_cuts_at_a_space_past_seventy_percent() -> None:
    chunk = Chunk("a" * 15 + " " + "b" * 10, "s")
    # room for text = 20, cut to 17 = 15 a's + " b"; the space (index 15) is past 11.9
    result = compose_context([chunk], MARKER_S + 20, "minimal")
    assert result == ComposedContext("[Source: s]\n" + "a" * 15 + "...", (chunk,), True)


def test_hard_truncation_without_a_late_space_cuts_mid_word() -> None:
    chunk = Chunk("aaaa " + "b" * 30, "s")
    result = compose_context([chunk], MARKER_S + 20, "minimal")
    assert result.text == "[Source: s]\naaaa bbbbbbbbbbbb..."
    assert len(result.text) == MARKER_S + 20
    assert result.truncated is True


def test_hard_truncation_space_must_be_strictly_past_seventy_percent() -> None:
    # cut length 10: a space at index 7 is exactly 70 % (kept mid-word), at 8 it is past
    assert hard_truncate("abcdefg hijklmnop", 13) == "abcdefg hi..."
    assert hard_truncate("abcdefgh ijklmnop", 13) == "abcdefgh..."
    assert hard_truncate("abcdefgh  jklmnop", 13) == "abcdefgh..."  # trailing space dropped


def test_hard_truncation_needs_room_for_one_character() -> None:
    assert hard_truncate("abcdef", 4) == "a..."
    assert hard_truncate("abcdef", 3) is None
    assert hard_truncate("", 10) is None


def test_truncation_with_header_and_footer_fits_the_budget_exactly() -> None:
    chunk = Chunk("word " * 200, "big")
    result = compose_context([chunk], 300)
    assert result.truncated is True
    assert len(result.text) <= 300
    assert result.text.startswith("Use the following information")
    assert result.text.endswith(
        "...\n\nIf the information above does not answer the question, say so."
    )


def test_budget_too_small_for_any_chunk_gives_no_information_if_it_fits() -> None:
    frame = len(TEMPLATE_TEXTS["english"].header + TEMPLATE_TEXTS["english"].footer)
    result = compose_context([REDIS], frame + 10)
    assert result == ComposedContext("No relevant information was found.", (), False)
    assert compose_context([REDIS], 20) == ComposedContext("", (), False)


@pytest.mark.parametrize("budget", [0, -1, -1000])
def test_non_positive_budget_composes_nothing(budget: int) -> None:
    assert compose_context([REDIS, PG], budget) == ComposedContext("", (), False)
    assert compose_context([], budget) == ComposedContext("", (), False)
