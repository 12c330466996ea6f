"""BM25 tokens: the one tokenizer of every retriever, and the key a token is indexed under.

``tokenize`` is what ``InMemoryRetriever`` and the SQL knowledge base both count; ``index_term``
maps a token to the word the database's full-text index stores for it (see there).
"""

from __future__ import annotations

import hashlib
import re

from contextstore.core.text import fold_arabic

__all__ = ["STOP_WORDS", "index_term", "tokenize"]

_TOKEN = re.compile(r"[\w\u0600-\u06FF]{2,}")
# The Arabic definite article and the conjunction/preposition clitics written onto it. Without
# this light stemming "الاسترداد" (the refund) and "استرداد" (a refund) never meet.
_ARABIC_PREFIXES = ("وال", "بال", "كال", "فال", "لل", "ال")
_ARABIC_ANY = re.compile(r"[\u0621-\u064A]")


def _normalize(text: str) -> str:
    # Mirrors the analyzer's normalisation (docs/design/analysis.md) plus lower-casing.
    return fold_arabic(text.lower())


def _stem(token: str) -> str:
    if "\u0621" <= token[0] <= "\u064a":
        for prefix in _ARABIC_PREFIXES:
            # Keep at least three letters, so short words such as "الى" are left alone.
            if token.startswith(prefix) and len(token) - len(prefix) >= 3:
                return token[len(prefix) :]
    return token


# Dropped from queries only (documents keep them so passage lengths stay honest): with the
# +1 IDF they would still give every passage containing "the" a small positive score.
# Compared after stemming, like every token.
_STOP_WORD_TEXT = """
a an and are as at be but by can could did do does for from had has have how i if in into
is it its me my no not of on or our should so than that the their them then there these
they this those to was we were what when where which who whom why will with would you your
في من الى على عن ما ماذا هل هو هي هذا هذه ذلك تلك التي الذي الذين كان كانت ان او ثم قد لا
لم لن مع كل بعد قبل عند كيف متى اين لماذا كم انا نحن انت
"""
STOP_WORDS = frozenset(_stem(word) for word in _STOP_WORD_TEXT.split())


def tokenize(text: str) -> list[str]:
    """BM25 tokens: lower-cased, Arabic-normalised words of 2+ characters, article stripped.

    ``"Rotate the TLS certs"`` → ``["rotate", "the", "tls", "certs"]``; ``"الاسترداد"`` →
    ``["استرداد"]``. Never raises; a non-``str`` or empty text gives ``[]``.
    """
    if not isinstance(text, str):
        return []
    tokens = _TOKEN.findall(_normalize(text))
    # Stemming is per token, but most texts have no Arabic at all: skip the loop for them.
    return [_stem(token) for token in tokens] if _ARABIC_ANY.search(text) else tokens


# A token the database's own tokenizers keep whole and unchanged: ASCII letters and digits, or
# Arabic letters (no tatweel, no marks). SQLite's unicode61 and PostgreSQL's parser agree on
# these; on anything else (underscores, accents, other scripts, Arabic punctuation) they split
# or fold differently from ``tokenize``, and from each other.
_PLAIN_TERM = re.compile(r"[a-z0-9]{1,64}|[\u0621-\u063A\u0641-\u064A]{1,64}")


def index_term(token: str) -> str:
    """The word the full-text index stores for ``token`` (a ``tokenize`` result).

    A plain token (ASCII letters and digits, or Arabic letters, at most 64) is itself; any
    other is ``"x"`` plus 32 hex digits of its BLAKE2b hash, a word both databases keep whole.
    So the index answers "which passages contain this token" exactly as ``tokenize`` counts,
    whatever the database's tokenizer would have made of the raw text, and BM25 statistics
    keyed by index terms are the tokenizer's own. Never raises (lone surrogates included).
    """
    if _PLAIN_TERM.fullmatch(token):
        return token
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16)
    return "x" + digest.hexdigest()
