"""Analyzers: simple is today's tokenizer, english stems and drops stop words, queries bounded."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.analyzers import (
    ENGLISH_STOP_WORDS,
    MAX_QUERY_TERMS,
    Analyzer,
    EnglishAnalyzer,
    SimpleAnalyzer,
    analyzer_named,
    first_distinct,
)
from contextstore.core.ranking import query_terms
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.core.text import ANALYSED_QUERY_CHARS, analysed_part
from contextstore.core.tokens import STOP_WORDS, tokenize
from contextstore.errors import ValidationError
from tests.factories import make_analysis


def test_simple_terms_are_the_tokenizer() -> None:
    text = "Rotate the TLS certs; الاسترداد and rollbacks"
    assert SimpleAnalyzer().terms(text) == tokenize(text)
    expected = ["rotate", "the", "tls", "certs", "استرداد", "and", "rollbacks"]
    assert SimpleAnalyzer().terms(text) == expected


def test_simple_query_drops_stop_words_unless_nothing_else() -> None:
    simple = SimpleAnalyzer()
    assert simple.query_terms("How do I rotate the TLS certs, the certs?") == (
        "rotate",
        "tls",
        "certs",
    )
    assert simple.query_terms("to be or not to be") == ("to", "be", "or", "not")
    assert simple.query_terms("!!") == ()


def test_english_stems_and_drops_stop_words_everywhere() -> None:
    english = EnglishAnalyzer()
    assert english.terms("The failover runbooks were failing over the databases") == [
        "failov",
        "runbook",
        "fail",
        "over",
        "databas",
    ]
    assert english.query_terms("How do I fail over Postgres? Failing over!") == (
        "fail",
        "over",
        "postgr",
        "failov",  # adjacent words joined, after the single words
        "overpostgr",  # not "postgrfail": the question mark ends the phrase
    )
    # A query of stop words only has nothing to match.
    assert english.query_terms("what is it that they were") == ()


def test_english_joins_adjacent_query_words_into_the_closed_compound() -> None:
    english = EnglishAnalyzer()
    assert english.weighted_query_terms("shutting down the primary, then back it up") == (
        ("shut", 1),
        ("down", 1),
        ("primari", 1),
        ("back", 1),
        ("up", 1),
        ("shutdown", 1),
    )  # "the", "then" and "it" stand between the other words: nothing joined across them
    assert english.query_terms("fail-over; set up") == (
        "fail",
        "over",
        "set",
        "up",
        "failov",
        "setup",
    )
    # The document side is not joined: "failover" is one term, "fail over" two.
    assert english.terms("failover; fail over") == ["failov", "fail", "over"]
    retriever = InMemoryRetriever(analyzer="english", mode="lexical")
    retriever.add("Runbook: promote the standby during a failover.", "runbook.md")
    retriever.add("Postgres tuning notes.", "tuning.md")
    found = retriever.retrieve("How do I fail over?", None, 5)
    assert [chunk.source for chunk in found] == ["runbook.md"]
    assert SimpleAnalyzer().query_terms("fail over") == ("fail", "over")


def test_joined_words_never_push_out_a_single_word() -> None:
    words = " ".join(f"w{i}x" for i in range(70))
    terms = EnglishAnalyzer().query_terms(words)
    assert len(terms) == 64
    assert all(len(term) <= 4 for term in terms)  # single words only: no "w0xw1x"
    terms = EnglishAnalyzer().query_terms(" ".join(f"w{i}x" for i in range(40)))
    assert len(terms) == 64 and terms[40] == "w0xw1x"


def test_english_keeps_the_words_that_carry_meaning() -> None:
    for kept in ("not", "no", "up", "down", "off", "over", "under", "before", "after"):
        assert kept not in ENGLISH_STOP_WORDS
    assert EnglishAnalyzer().terms("shut down, not up") == ["shut", "down", "not", "up"]


def test_english_leaves_arabic_to_the_simple_rules() -> None:
    assert EnglishAnalyzer().terms("سياسة الاسترداد في المتجر") == ["سياسة", "استرداد", "متجر"]


def test_a_query_keeps_its_first_64_distinct_terms() -> None:
    words = [f"w{i:05d}" for i in range(20_000)]
    query = " ".join(["the", *words, "w00003", "zzz"])
    expected = tuple(words[:MAX_QUERY_TERMS])
    assert MAX_QUERY_TERMS == 64
    assert SimpleAnalyzer().query_terms(query) == expected
    assert query_terms(query) == expected
    assert EnglishAnalyzer().query_terms(query) == expected


def test_repeats_do_not_count_against_the_bound() -> None:
    query = " ".join(["alpha"] * 500 + [f"w{i}" for i in range(100)])
    terms = SimpleAnalyzer().query_terms(query)
    assert len(terms) == 64
    assert terms[:2] == ("alpha", "w0")
    assert terms[-1] == "w62"


def test_stop_words_only_queries_are_bounded_too() -> None:
    stops = sorted(STOP_WORDS)
    assert len(first_distinct(stops, STOP_WORDS)) == min(64, len(stops))
    assert first_distinct(["a", "b", "a"], frozenset({"a", "b"}), limit=1) == ("a",)


def test_a_20000_word_query_is_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Real words, so the english analyzer stems every one it reads.
    text = " ".join(f"configuring{i} replicas{i} failing" for i in range(7_000))
    english = EnglishAnalyzer()
    stemmed: list[int] = []
    stem_words = english._stemmer().stemWords

    class Counting:
        def stemWords(self, words: list[str]) -> list[str]:
            stemmed.append(len(words))
            return list(stem_words(words))

    monkeypatch.setattr(english, "_stemmer", Counting)
    for analyzer in (SimpleAnalyzer(), english):
        started = time.perf_counter()
        terms = analyzer.query_terms(text)
        elapsed = time.perf_counter() - started
        assert len(terms) == 64
        # The work is linear: each distinct word of the first 16,384 characters (which a query
        # is analysed on) is stemmed once: 950 of their 1,423 words.
        # The clock only guards against a blow-up: ~0.1 s quiet, ~1.5 s on a loaded machine.
        assert elapsed < 5.0, (analyzer, elapsed)
    assert sum(stemmed) == len(set(analysed_part(text).split())) == 950
    english.query_terms(text)
    assert sum(stemmed) == 950  # the second time every stem comes from the cache


def test_names_resolve_and_unknown_names_are_refused() -> None:
    assert isinstance(analyzer_named("simple"), SimpleAnalyzer)
    assert isinstance(analyzer_named(" English "), EnglishAnalyzer)
    english = EnglishAnalyzer()
    assert analyzer_named(english) is english
    assert isinstance(english, Analyzer)
    with pytest.raises(ValidationError) as error:
        analyzer_named("french")
    assert error.value.field == "analyzer"
    assert "simple, english" in str(error.value)
    with pytest.raises(ValidationError):
        analyzer_named(3)  # type: ignore[arg-type]


def test_the_stemmer_is_safe_across_threads() -> None:
    english = EnglishAnalyzer()
    text = " ".join(f"running{i % 50} caches databases failing" for i in range(2_000))
    expected = EnglishAnalyzer().terms(text)
    results: list[list[str]] = []

    def work() -> None:
        for _ in range(5):
            results.append(english.terms(text))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20
    assert all(result == expected for result in results)


@settings(max_examples=60)
@given(st.text(alphabet="abc THE the و ال !.", max_size=80))
def test_simple_query_terms_match_the_old_rule_below_the_bound(text: str) -> None:
    terms = tuple(dict.fromkeys(tokenize(text)))
    content = tuple(t for t in terms if t not in STOP_WORDS)
    assert SimpleAnalyzer().query_terms(text) == (content or terms)[:64]


def test_the_retriever_uses_its_analyzer_for_documents_and_queries() -> None:
    docs = [
        ("Failing over PostgreSQL: promote the standby, then repoint clients.", "failover.md"),
        ("Refunds are issued within five business days.", "refunds.md"),
    ]
    simple = InMemoryRetriever()
    english = InMemoryRetriever(analyzer="english")
    for retriever in (simple, english):
        retriever.add_documents(docs)
    query = "how do I fail over"
    assert [c.source for c in english.retrieve(query, make_analysis(query))] == ["failover.md"]
    # The simple analyzer only matches "over": "fail" is not "failing".
    hits = simple.retrieve("fail", make_analysis("fail"))
    assert hits == []
    assert english.analyzer.name == "english"
    with pytest.raises(ValidationError):
        InMemoryRetriever(analyzer="nope")


def test_english_weighs_a_repeated_query_word_simple_does_not() -> None:
    query = "replica lag, replica promotion, the replica"
    assert EnglishAnalyzer().weighted_query_terms(query) == (
        ("replica", 3),
        ("lag", 1),
        ("promot", 1),
        ("replicalag", 1),
        ("replicapromot", 1),
    )
    assert SimpleAnalyzer().weighted_query_terms(query) == (
        ("replica", 1),
        ("lag", 1),
        ("promotion", 1),
    )


def test_a_repeated_word_counts_twice_in_english_bm25() -> None:
    english = InMemoryRetriever(analyzer="english")
    english.add("replica lag alert", "a.md")
    english.add("disk alert", "b.md")
    english.add("nothing here", "c.md")
    once = english.retrieve("replica", None, 1)[0].score
    twice = english.retrieve("replica replica", None, 1)[0].score
    assert twice == 2 * once
    simple = InMemoryRetriever()
    simple.add("replica lag alert", "a.md")
    simple.add("disk alert", "b.md")
    assert simple.retrieve("replica replica", None, 1) == simple.retrieve("replica", None, 1)


def test_a_query_is_analysed_on_its_first_16_ki_characters_cut_at_whitespace() -> None:
    assert ANALYSED_QUERY_CHARS == 16_384
    short = "a" * 16_384
    assert analysed_part(short) is short
    # 16,378 characters, a space, then a word across the bound: cut before the word.
    long = "x" * 16_378 + " " + "crossing" + " tail" * 10
    assert analysed_part(long) == "x" * 16_378 + " "
    assert analysed_part("y" * 16_384 + " z") == "y" * 16_384  # whitespace at the bound
    assert analysed_part("w" * 20_000) == "w" * 16_384  # no whitespace: cut at the bound
    # Words past the bound are neither terms nor keywords; the query itself is kept whole.
    padding = " ".join(f"w{n}" for n in range(13_000))  # 79,889 characters
    query = f"{padding} Kubernetes zzlast"
    assert SimpleAnalyzer().query_terms(query) == tuple(f"w{n}" for n in range(64))
    # Stop words up to the bound, a content word after it: the stop words are the terms.
    assert SimpleAnalyzer().query_terms("the " * 5_000 + "zzlast") == ("the",)
    assert EnglishAnalyzer().weighted_query_terms("w1 " * 30_000)[0] == ("w1", 5_461)
    analysis = RuleBasedQueryAnalyzer().analyze(query)
    assert analysis.original_query == query
    assert "Kubernetes" not in analysis.entities and "zzlast" not in analysis.keywords
    assert analysis == replace(
        RuleBasedQueryAnalyzer().analyze(analysed_part(query)), original_query=query
    )
