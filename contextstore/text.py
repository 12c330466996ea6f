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
