"""ContextGuard: every check, its exact warning text, order and short-circuits
(docs/design/guard.md)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import pytest

from contextstore.config import ContextEngineConfig, GuardConfig
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.guard import ContextGuard, cosine_similarity

ANALYSIS = RuleBasedQueryAnalyzer().analyze("what is redis")
GOOD = "[Source: docs]\nRedis is an in-memory data store."
LOGGER = "contextstore.core.guard"


def guard(embed_fn: Callable[[str], np.ndarray] | None = None, **settings: object) -> ContextGuard:
    return ContextGuard(ContextEngineConfig(guard=GuardConfig(**settings)), embed_fn)  # type: ignore[arg-type]


def vectors(mapping: dict[str, list[float]]) -> Callable[[str], np.ndarray]:
    """A fake embedder: the query gets one fixed vector, any other text another."""

    def embed(text: str) -> np.ndarray:
        return np.array(mapping.get(text, mapping["*"]))

    return embed


def test_a_good_context_passes_without_warnings() -> None:
    assert guard().validate(GOOD, "q", ANALYSIS) == (True, [])


def test_disabled_guard_passes_even_an_empty_context(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert guard(enabled=False).validate("", "q", ANALYSIS) == (True, [])
        assert guard(enabled=False).validate("x", "q", ANALYSIS) == (True, [])
    assert not caplog.records


@pytest.mark.parametrize("context", ["", "   ", "\n\t "])
def test_empty_context_short_circuits_with_only_the_empty_warning(context: str) -> None:
    assert guard().validate(context, "q", ANALYSIS) == (False, ["context is empty ⚠"])


def test_blank_context_runs_the_other_checks_when_check_empty_is_off() -> None:
    assert guard(check_empty=False).validate("  ", "q", ANALYSIS) == (
        False,
        ["context is too short (2 characters < 10).", "no valid source found in context."],
    )


def test_too_short_fails_and_later_checks_still_run() -> None:
    passed, warnings = guard().validate("abc", "q", ANALYSIS)
    assert passed is False
    assert warnings == [
        "context is too short (3 characters < 10).",
        "no valid source found in context.",
    ]


def test_length_boundaries_are_inclusive() -> None:
    exact_min = "---" + "x" * 7
    assert guard().validate(exact_min, "q", ANALYSIS) == (True, [])
    exact_max = "---" + "x" * 7997
    assert guard().validate(exact_max, "q", ANALYSIS) == (True, [])


def test_too_long_is_a_warning_only() -> None:
    context = "[Source: a]\n" + "x" * 8000
    passed, warnings = guard().validate(context, "q", ANALYSIS)
    assert passed is True
    assert warnings == ["context is too long (8012 > 8000). consider compressing it."]


def test_limits_come_from_config() -> None:
    passed, warnings = guard(min_context_length=50, max_context_length=60).validate(
        GOOD, "q", ANALYSIS
    )
    assert (passed, warnings) == (False, ["context is too short (48 characters < 50)."])


@pytest.mark.parametrize(
    "context",
    [
        "[Source: a] some text here",
        "[source: a] some text here",
        "[المصدر: أ] نص طويل بما يكفي",
        "part one\n---\npart two",
    ],
)
def test_source_markers_pass_coverage(context: str) -> None:
    assert guard().validate(context, "q", ANALYSIS) == (True, [])


@pytest.mark.parametrize(
    "context",
    ["[: a bare bracket colon", "[Note: not a source]", "[SOURCE: upper]", "-- two dashes only"],
)
def test_bare_bracket_colon_and_lookalikes_are_not_sources(context: str) -> None:
    assert guard().validate(context, "q", ANALYSIS) == (True, ["no valid source found in context."])


def test_source_coverage_can_be_turned_off() -> None:
    assert guard(check_source_coverage=False).validate("plain text here", "q", ANALYSIS) == (
        True,
        [],
    )


def test_warnings_come_in_check_order() -> None:
    embed = vectors({"q": [1.0, 0.0], "*": [0.0, 1.0]})
    g = guard(embed, check_relevance=True, min_context_length=100, max_context_length=5)
    passed, warnings = g.validate("no markers", "q", ANALYSIS)
    assert passed is False
    assert warnings == [
        "context is too short (10 characters < 100).",
        "context is too long (10 > 5). consider compressing it.",
        "no valid source found in context.",
        "context is not relevant to the query (similarity=0.000 < 0.1).",
    ]


def test_relevance_passes_above_the_threshold() -> None:
    embed = vectors({"q": [1.0, 0.0], "*": [0.6, 0.8]})  # cosine 0.6
    assert guard(embed, check_relevance=True).validate(GOOD, "q", ANALYSIS) == (True, [])


def test_relevance_fails_below_the_threshold_with_exact_text() -> None:
    embed = vectors({"q": [1.0, 0.0], "*": [0.05, 1.0]})  # cosine ≈ 0.0499
    passed, warnings = guard(embed, check_relevance=True, relevance_threshold=0.25).validate(
        GOOD, "q", ANALYSIS
    )
    assert passed is False
    assert warnings == ["context is not relevant to the query (similarity=0.050 < 0.25)."]


def test_relevance_embeds_only_the_first_512_characters() -> None:
    seen: list[str] = []

    def embed(text: str) -> np.ndarray:
        seen.append(text)
        return np.array([1.0])

    context = "---" + "y" * 1000
    guard(embed, check_relevance=True).validate(context, "the query", ANALYSIS)
    assert seen == ["the query", context[:512]]


def test_zero_vector_means_similarity_zero() -> None:
    embed = vectors({"q": [0.0, 0.0], "*": [1.0, 0.0]})
    passed, warnings = guard(embed, check_relevance=True).validate(GOOD, "q", ANALYSIS)
    assert passed is False
    assert warnings == ["context is not relevant to the query (similarity=0.000 < 0.1)."]
    assert cosine_similarity([0.0, 0.0], [0.0, 0.0]) == 0.0


def test_relevance_is_off_by_default_even_with_an_embed_fn() -> None:
    def embed(text: str) -> np.ndarray:
        raise AssertionError("must not be called")

    assert guard(embed).validate(GOOD, "q", ANALYSIS) == (True, [])


@pytest.mark.parametrize(
    "embed",
    [
        lambda text: (_ for _ in ()).throw(RuntimeError("model down")),
        lambda text: np.array([1.0, 2.0]) if text == "q" else np.array([1.0, 2.0, 3.0]),
        lambda text: np.array([float("nan"), 1.0]),
    ],
    ids=["raises", "size-mismatch", "nan"],
)
def test_embedding_failure_passes_counts_and_logs(
    caplog: pytest.LogCaptureFixture, embed: Callable[[str], np.ndarray]
) -> None:
    g = guard(embed, check_relevance=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert g.validate(GOOD, "q", ANALYSIS) == (True, [])
    assert g.relevance_errors == 1
    assert any(
        r.levelno == logging.WARNING and "relevance check skipped" in r.getMessage()
        for r in caplog.records
    )


def test_relevance_on_without_embed_fn_warns_once_at_construction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        g = guard(check_relevance=True)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "no embed_fn" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert g.validate(GOOD, "q", ANALYSIS) == (True, [])
        assert g.validate(GOOD, "q", ANALYSIS) == (True, [])
    assert not caplog.records
    assert g.relevance_errors == 0


def test_no_construction_warning_when_relevance_is_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        guard()
    assert not caplog.records


def test_warnings_are_logged_together_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        guard().validate("abc", "q", ANALYSIS)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    message = caplog.records[0].getMessage()
    assert "context is too short (3 characters < 10)." in message
    assert "no valid source found in context." in message


def test_a_clean_pass_logs_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        guard().validate(GOOD, "q", ANALYSIS)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_the_guard_keeps_its_own_copy_of_the_settings() -> None:
    config = ContextEngineConfig()
    g = ContextGuard(config)
    config.guard.enabled = False
    assert g.validate("", "q", ANALYSIS) == (False, ["context is empty ⚠"])


def test_analysis_is_optional() -> None:
    assert guard().validate(GOOD, "q") == (True, [])


def test_thread_safety_counter_is_exact() -> None:
    def broken(text: str) -> np.ndarray:
        raise RuntimeError("boom")

    g = guard(broken, check_relevance=True)
    threads, rounds = 16, 200
    results: list[tuple[bool, list[str]]] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)
    logging.getLogger(LOGGER).disabled = True
    try:

        def work() -> None:
            start.wait()
            for _ in range(rounds):
                outcome = g.validate(GOOD, "q", ANALYSIS)
                with lock:
                    results.append(outcome)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        logging.getLogger(LOGGER).disabled = False
    assert g.relevance_errors == threads * rounds
    assert len(results) == threads * rounds
    assert all(outcome == (True, []) for outcome in results)
