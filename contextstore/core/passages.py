"""Passages: how a document is cut into the chunks every retriever indexes.

One definition, shared by ``InMemoryRetriever`` and the SQL knowledge base, so both index the
same passages of the same documents.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_PASSAGE_CHARS", "split_passages"]

DEFAULT_PASSAGE_CHARS = 800

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"(?<=\D[.!?؟।])\s+")


def split_passages(text: str, max_chars: int = DEFAULT_PASSAGE_CHARS) -> list[str]:
    """Split a document into passages of about ``max_chars`` characters at most.

    A text of at most ``max_chars`` (after stripping) is one passage. Longer texts are split
    into paragraphs on blank lines, and consecutive paragraphs are packed together while the
    passage stays within ``max_chars``, so a heading travels with the paragraph below it.
    A paragraph longer than ``max_chars`` is cut at the last sentence end that fits
    (``. ! ? ؟`` after a non-digit, then white space); with no sentence end in reach, at the
    last space or line break, or hard at ``max_chars`` when there is none. Blank text gives
    ``[]``. Every passage is a stripped, verbatim slice of the document (paragraphs packed
    together keep the blank line between them).
    """
    text = text.strip()
    if not text:
        return []
    max_chars = max(1, max_chars)
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            pieces.append(paragraph)
        else:
            pieces.extend(_split_long_paragraph(paragraph, max_chars))
    passages: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 2 + len(piece) <= max_chars:
            current = f"{current}\n\n{piece}"
        else:
            if current:
                passages.append(current)
            current = piece
    if current:
        passages.append(current)
    return passages


def _split_long_paragraph(paragraph: str, max_chars: int) -> list[str]:
    # Cut points are offsets into the paragraph, so every piece is a verbatim slice (line
    # breaks inside a list paragraph survive). A sentence end is ". ! ? ؟ ।" plus white
    # space, not after a digit, so "1. Declare …" list items are not cut after the number.
    ends = [match.end() for match in _SENTENCE_END.finditer(paragraph)]
    pieces: list[str] = []
    start = 0
    while len(paragraph) - start > max_chars:
        limit = start + max_chars
        # Prefer a sentence end, then a line break, in the second half of the window (a cut
        # near the start would leave a scrap), then any space, then a hard cut.
        floor = start + max_chars // 2
        cut = max((end for end in ends if floor < end <= limit), default=-1)
        if cut < 0:
            cut = paragraph.rfind("\n", floor + 1, limit + 1)
        if cut < 0:
            cut = paragraph.rfind(" ", start + 1, limit + 1)
        if cut < 0:
            cut = limit
        piece = paragraph[start:cut].rstrip()
        if piece:
            pieces.append(piece)
        start = cut
        while start < len(paragraph) and paragraph[start].isspace():
            start += 1
    if start < len(paragraph):
        pieces.append(paragraph[start:])
    return pieces
