"""Analyzers: how text becomes the terms BM25 counts, at ingestion and at query time alike.

Every retriever (in memory, SQLite, PostgreSQL) analyzes text in Python with the functions
here, so they count the same terms and agree on every ranking. Two analyzers exist:

* ``simple`` (the default): ``tokens.tokenize`` — lower-cased, Arabic-normalised words of two
  or more characters, the Arabic article stripped. Documents keep their stop words (passage
  lengths stay honest); a query drops them unless it has nothing else.
* ``english``: the same words, English stop words (``ENGLISH_STOP_WORDS``, below, plus the
  simple analyzer's Arabic ones) dropped from documents and queries alike, every other word
  reduced to its Snowball (Porter 2) English stem, so "failover", "fails" and "failing" meet
  "fail". A query of stop words only has no terms and matches nothing, as in a search engine.

A query is bounded after analysis: ``query_terms`` keeps at most ``MAX_QUERY_TERMS`` distinct
terms, the first ones in the order they appear (stop words skipped while any other term is
there). The rule reads nothing but the query, so every backend applies it without a round
trip, and the work is linear in the query: a pasted 20,000-word text costs one tokenizer pass.
Only a query's first 16,384 characters are read (``text.analysed_part``), as by the query
analysis, so no regular-expression pass over it is longer than that.

``weighted_query_terms`` pairs each of those terms with its weight in BM25's sum: 1 for every
term with ``simple`` (each distinct word counts once, as it always has), and with ``english``
the number of times the term occurs in the query (BM25's query term frequency, as search
engines count a repeated query word).

The ``english`` analyzer also joins two adjacent content words of a query (no stop word and no
phrase-ending punctuation between them) into one more term, weight 1, after the single words:
English writes the same thing as a phrasal verb and as a closed compound ("fail over" and
"failover", "shut down" and "shutdown", "set up" and "setup"), and a question uses the verb
where a runbook names the noun. A joined word no document contains scores nothing, so the rule
costs one posting lookup when it does not apply. Documents are not joined: their terms stay
what BM25 reference implementations count.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import Stemmer

from contextstore.core.text import analysed_part
from contextstore.core.tokens import STOP_WORDS, tokenize
from contextstore.errors import ValidationError

__all__ = [
    "ANALYZER_NAMES",
    "ENGLISH_STOP_WORDS",
    "MAX_QUERY_TERMS",
    "Analyzer",
    "EnglishAnalyzer",
    "SimpleAnalyzer",
    "analyzer_named",
    "first_distinct",
]

MAX_QUERY_TERMS = 64
"""At most this many distinct terms of a query are scored (the first ones, in order)."""


@runtime_checkable
class Analyzer(Protocol):
    """Text → terms. ``name`` is what a namespace records to name its analyzer."""

    @property
    def name(self) -> str: ...

    def terms(self, text: str) -> list[str]:
        """Every term of a document, in order, repeats included (what BM25 counts)."""
        ...

    def query_terms(self, query: str) -> tuple[str, ...]:
        """The query's distinct terms, first seen first, at most ``MAX_QUERY_TERMS``.

        ``english`` adds each pair of adjacent content words joined into one term, after the
        single words (see the module docstring).
        """
        ...

    def weighted_query_terms(self, query: str) -> tuple[tuple[str, int], ...]:
        """``query_terms`` paired with each term's weight (a positive whole number)."""
        ...


def first_distinct(
    terms: Iterable[str], stop_words: frozenset[str], limit: int = MAX_QUERY_TERMS
) -> tuple[str, ...]:
    """The first ``limit`` distinct terms that are not stop words, in first-seen order.

    When every term is a stop word, the first ``limit`` distinct stop words instead. Reading
    stops as soon as ``limit`` content terms are found.
    """
    content: dict[str, None] = {}
    stops: dict[str, None] = {}
    for term in terms:
        if term in stop_words:
            if len(stops) < limit:
                stops[term] = None
        else:
            content[term] = None
            if len(content) >= limit:
                break
    return tuple(content or stops)


class SimpleAnalyzer:
    """``tokens.tokenize``; stop words dropped from queries only, unless nothing else is left."""

    name = "simple"

    def __repr__(self) -> str:
        return "SimpleAnalyzer()"

    def terms(self, text: str) -> list[str]:
        return tokenize(text)

    def query_terms(self, query: str) -> tuple[str, ...]:
        return first_distinct(tokenize(analysed_part(query)), STOP_WORDS)

    def weighted_query_terms(self, query: str) -> tuple[tuple[str, int], ...]:
        return tuple((term, 1) for term in self.query_terms(query))


# English function words: articles, pronouns, auxiliaries, conjunctions, prepositions and
# the commonest adverbs. Content words that often matter in technical text ("not", "no",
# "up", "down", "off", "over", "under", "before", "after", "against") are deliberately kept:
# "fail over", "shut down" and "not found" lose their meaning without them.
_ENGLISH_STOP_WORD_TEXT = """
a about am an and any are as at be been being both but by can could did do does doing
each few for from further had has have having he her here hers herself him himself his how
i if in into is it its itself just me more most my myself nor of on once only or other our
ours ourselves own same she should so some such than that the their theirs them themselves
then there these they this those through to too very was we were what when where which
while who whom why will with would you your yours yourself yourselves
"""
ENGLISH_STOP_WORDS = frozenset(_ENGLISH_STOP_WORD_TEXT.split())
"""The English words the ``english`` analyzer drops (compared before stemming)."""

# Arabic stop words keep the simple analyzer's list (already article-stripped); its English
# ones are replaced by the list above.
_ENGLISH_ANALYZER_STOPS = ENGLISH_STOP_WORDS | {word for word in STOP_WORDS if not word.isascii()}
# Punctuation that ends a phrase: "Postgres? Failing" is not a compound. Hyphens and slashes
# are not breaks ("fail-over" is one). None of these characters is ever part of a token.
_CLAUSE_BREAK = re.compile(r"[.,;:!?()\[\]{}\"|]+")
# Distinct words whose stems one process keeps; past this the cache is dropped and rebuilt, so
# a long-lived process that sees unbounded vocabulary (user queries) stays bounded.
_MAX_CACHED_STEMS = 200_000


class EnglishAnalyzer:
    """Snowball English stems of ``tokenize``'s words, English stop words dropped everywhere.

    Thread-safe: each thread has its own stemmer (a Snowball stemmer keeps state between
    calls); the shared stem cache only ever gains entries equal to what any thread computes.
    """

    name = "english"

    def __init__(self) -> None:
        self._local = threading.local()
        self._stems: dict[str, str] = {}

    def __repr__(self) -> str:
        return "EnglishAnalyzer()"

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer: Stemmer.Stemmer | None = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = Stemmer.Stemmer("english")
            self._local.stemmer = stemmer
        return stemmer

    def _stem_all(self, words: list[str]) -> list[str]:
        stems = self._stems
        missing = [word for word in dict.fromkeys(words) if word not in stems]
        if missing:
            if len(stems) + len(missing) > _MAX_CACHED_STEMS:
                stems = self._stems = {}
            stems.update(zip(missing, self._stemmer().stemWords(missing), strict=True))
        return [stems[word] for word in words]

    def terms(self, text: str) -> list[str]:
        words = [word for word in tokenize(text) if word not in _ENGLISH_ANALYZER_STOPS]
        return self._stem_all(words)

    def query_terms(self, query: str) -> tuple[str, ...]:
        return tuple(term for term, _ in self.weighted_query_terms(query))

    def weighted_query_terms(self, query: str) -> tuple[tuple[str, int], ...]:
        # Every word is stemmed (each distinct word once, through the cache) so a kept term's
        # count covers the whole query.
        if not isinstance(query, str):
            return ()
        # None marks a stop word or a clause break: only words side by side are joined.
        words: list[str | None] = []
        for clause in _CLAUSE_BREAK.split(analysed_part(query)):
            words += tokenize(clause)
            words.append(None)
        stems: list[str | None] = [None] * len(words)
        kept = [i for i, word in enumerate(words) if word and word not in _ENGLISH_ANALYZER_STOPS]
        for i, stem in zip(kept, self._stem_all([words[i] or "" for i in kept]), strict=True):
            stems[i] = stem
        counts = Counter(stem for stem in stems if stem is not None)
        if len(counts) < MAX_QUERY_TERMS:
            # Stems joined, then stemmed again: "failing over" meets "failover" too.
            joined = [
                first + second
                for first, second in itertools.pairwise(stems)
                if first is not None and second is not None and (first + second).isascii()
            ]
            for term in self._stem_all(joined):
                counts.setdefault(term, 1)
        return tuple(itertools.islice(counts.items(), MAX_QUERY_TERMS))


SIMPLE = SimpleAnalyzer()
ENGLISH = EnglishAnalyzer()
_BY_NAME: dict[str, Analyzer] = {"simple": SIMPLE, "english": ENGLISH}
ANALYZER_NAMES = tuple(_BY_NAME)
"""Every analyzer name a namespace may record."""


def analyzer_named(name: str | Analyzer) -> Analyzer:
    """The analyzer called ``name`` (``"simple"`` or ``"english"``); an analyzer passes through.

    Any other name raises ``ValidationError("analyzer")`` listing the names that exist.
    """
    if not isinstance(name, str):
        if isinstance(name, Analyzer):
            return name
        raise ValidationError("analyzer", f"must be a name or an Analyzer, got {name!r}")
    found = _BY_NAME.get(name.strip().lower())
    if found is None:
        raise ValidationError(
            "analyzer", f"unknown analyzer {name!r}; expected one of {', '.join(ANALYZER_NAMES)}"
        )
    return found
