"""Text folding shared by the analyzer, the retriever and the embedder.

One definition, so a query and a document written with and without Arabic diacritics meet on
the same words wherever they are compared.
"""

from __future__ import annotations

import re

_DIACRITICS = re.compile("[\u064b-\u0652]")
_ALEF_FORMS = str.maketrans({"إ": "ا", "أ": "ا", "آ": "ا"})


def fold_arabic(text: str) -> str:
    """Drop Arabic diacritics U+064B–U+0652 and fold ``إأآ`` to ``ا``; other text unchanged.

    Never raises: lone surrogates and any other code points pass through as they are.
    """
    return _DIACRITICS.sub("", text).translate(_ALEF_FORMS)


# A query is analysed (its terms, keywords, entities, intent, complexity) on at most this many
# characters: each regular-expression pass over the text holds the GIL, so analysing a 1 MiB
# query in a thread still paused the event loop for half a second
# (docs/decisions/0092-queries-are-analysed-on-their-first-16-ki-characters.md).
ANALYSED_QUERY_CHARS = 16_384


def analysed_part(query: str) -> str:
    """The part of ``query`` analysis reads: all of it up to ``ANALYSED_QUERY_CHARS``
    characters; of a longer query, its first ``ANALYSED_QUERY_CHARS`` cut back to the last
    whitespace among them, so no word is cut in half (cut at the bound when there is none)."""
    if len(query) <= ANALYSED_QUERY_CHARS:
        return query
    end = ANALYSED_QUERY_CHARS
    if query[end].isspace():
        return query[:end]
    cut = end
    while cut > 0 and not query[cut - 1].isspace():
        cut -= 1
    return query[:cut] if cut else query[:end]
