"""Filter, rank and compose retrieved chunks into one context text. docs/design/composition.md."""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from contextstore.config import TEMPLATES
from contextstore.core.analysis import QueryAnalysis
from contextstore.errors import ConfigurationError


@dataclass(frozen=True)
class Chunk:
    """One retrieved passage: its text, where it came from, the retriever's score."""

    text: str
    source: str
    score: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ComposedContext:
    """The composed text (never longer than the budget), the chunks in it, in order, and
    whether the only chunk in it was hard-truncated to fit."""

    text: str
    chunks_used: tuple[Chunk, ...]
    truncated: bool


@dataclass(frozen=True)
class Template:
    """The fixed texts around the chunks; ``source_label`` opens each chunk's marker line."""

    header: str
    footer: str
    no_information: str
    source_label: str = "Source"


# The Arabic template cites with ``[المصدر: …]``, one of the markers ContextGuard accepts.
TEMPLATE_TEXTS: Final[Mapping[str, Template]] = {
    "english": Template(
        header="Use the following information to answer the question.\n\n",
        footer="\n\nIf the information above does not answer the question, say so.",
        no_information="No relevant information was found.",
    ),
    "arabic": Template(
        header="استخدم المعلومات التالية للإجابة عن السؤال.\n\n",
        footer="\n\nإذا كانت المعلومات أعلاه لا تجيب عن السؤال، فاذكر ذلك.",
        no_information="لم يتم العثور على معلومات ذات صلة.",
        source_label="المصدر",
    ),
    "minimal": Template(header="", footer="", no_information="No relevant information was found."),
    "structured": Template(
        header="## Context\n\n",
        footer="\n\n## End of context",
        no_information="## Context\n\nNo relevant information was found.",
    ),
}

CHUNK_SEPARATOR: Final = "\n---\n"
ELLIPSIS: Final = "..."
# A hard cut moves back to the last space only if that keeps more than 70 % of the cut.
SPACE_CUT_RATIO: Final = 0.7

_SEPARATOR_RUN = re.compile(r"[.\-_*]{5,}")
_PAGE_MARKER = re.compile(r"(?:page|صفحة)\s*\d+(?:\s*(?:of|/|من)\s*\d+)?", re.IGNORECASE)
# Both checks are pure functions of a chunk's text, and a fleet retrieves the same passages
# over and over: remembering the last texts' answers saves about a tenth of a run's pure work.
TEXT_CHECKS_CACHED: Final = 1024


# --------------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=TEXT_CHECKS_CACHED)
def is_noise(text: str) -> bool:
    """True for text no reader wants in a context.

    - blank (empty or whitespace only);
    - separator noise: at least half of the non-whitespace characters sit in runs of five or
      more of ``.`` ``-`` ``_`` ``*`` (runs counted with whitespace removed, so ``- - - - -``
      is a run). A paragraph that merely contains a ``-----`` rule is kept;
    - page markers: every non-blank line is ``page N`` (also ``page N of M``, ``page N/M``,
      Arabic ``صفحة N``), case-insensitive.
    """
    dense = "".join(text.split())
    if not dense:
        return True
    in_runs = sum(len(run) for run in _SEPARATOR_RUN.findall(dense))
    if 2 * in_runs >= len(dense):
        return True
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not _PAGE_MARKER.fullmatch(stripped):
            return False
    return True


@functools.lru_cache(maxsize=TEXT_CHECKS_CACHED)
def dedup_key(text: str) -> str:
    """MD5 hex (a digest, not security) of the lowercased, whitespace-collapsed text."""
    collapsed = " ".join(text.lower().split())
    # surrogatepass: a lone surrogate is still a distinct, hashable text.
    data = collapsed.encode("utf-8", "surrogatepass")
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def filter_chunks(
    chunks: Iterable[Chunk], min_length: int = 20, max_length: int = 4000
) -> list[Chunk]:
    """Keep the chunks worth composing, in their given order, unchanged.

    Dropped: noise (see :func:`is_noise`); a stripped text shorter than ``min_length`` or
    longer than ``max_length`` characters; a duplicate of an earlier kept chunk by
    :func:`dedup_key` (the first one is kept, whatever its source or score).
    """
    kept: list[Chunk] = []
    seen: set[str] = set()
    for chunk in chunks:
        if is_noise(chunk.text):
            continue
        if not min_length <= len(chunk.text.strip()) <= max_length:
            continue
        key = dedup_key(chunk.text)
        if key in seen:
            continue
        seen.add(key)
        kept.append(chunk)
    return kept


# --------------------------------------------------------------------------------------------
# Rank
# --------------------------------------------------------------------------------------------


def rank_chunks(chunks: Iterable[Chunk], analysis: QueryAnalysis | None = None) -> list[Chunk]:
    """Highest ``score`` first; stable, so equal scores keep their given order.

    With an ``analysis``, equal scores are first ordered by how many of its keywords occur in
    the chunk's lowercased text (more first); the keywords never outrank a higher score. A NaN
    score ranks last.
    """
    keywords = analysis.keywords if analysis is not None else ()

    def key(chunk: Chunk) -> tuple[float, int]:
        score = -math.inf if math.isnan(chunk.score) else chunk.score
        lowered = chunk.text.lower() if keywords else ""
        overlap = sum(1 for word in keywords if word in lowered)
        return (-score, -overlap)

    return sorted(chunks, key=key)


# --------------------------------------------------------------------------------------------
# Compose
# --------------------------------------------------------------------------------------------


def get_template(name: str) -> Template:
    """The template called ``name``; ``ConfigurationError`` naming ``template`` otherwise."""
    try:
        return TEMPLATE_TEXTS[name]
    except (KeyError, TypeError):
        raise ConfigurationError(
            f"template: unknown template {name!r}; choose one of {', '.join(TEMPLATES)}"
        ) from None


def compose_context(
    chunks: Sequence[Chunk], budget: int, template: str = "english"
) -> ComposedContext:
    """Compose ``header + block + footer`` in at most ``budget`` characters (all of it counts).

    A block is ``[Source: {source}]\\n{text}`` (``[المصدر: …]`` for ``arabic``) with the
    chunk text stripped; blocks are joined with ``\\n---\\n``. Chunks are taken in the order
    given (call :func:`rank_chunks` first) until one does not fit; composing stops there,
    later, smaller chunks are not tried. If the first chunk does not fit, its text is cut to
    fill the budget exactly: to ``room - 3`` characters, back to the last space when that space
    lies past 70 % of the cut, then ``...``; ``truncated`` is then True and the original chunk
    is in ``chunks_used``.

    When nothing is composed — no chunks, or a budget too small for the header, footer, marker
    and one character plus ``...`` — the text is the template's no-information text if it fits
    the budget, else ``""``. So a budget ``<= 0`` always gives ``""``.
    Raises ``ConfigurationError`` for an unknown template.
    """
    parts = get_template(template)
    frame = len(parts.header) + len(parts.footer)
    blocks: list[str] = []
    used: list[Chunk] = []
    length = frame
    for chunk in chunks:
        block = _block(parts, chunk.source, chunk.text.strip())
        added = len(block) + (len(CHUNK_SEPARATOR) if blocks else 0)
        if length + added > budget:
            break
        blocks.append(block)
        used.append(chunk)
        length += added
    truncated = False
    if not blocks and len(chunks) > 0:
        first = chunks[0]
        room = budget - frame - len(_block(parts, first.source, ""))
        cut = hard_truncate(first.text.strip(), room)
        if cut is not None:
            blocks.append(_block(parts, first.source, cut))
            used.append(first)
            truncated = True
    if not blocks:
        text = parts.no_information if len(parts.no_information) <= budget else ""
        return ComposedContext(text=text, chunks_used=(), truncated=False)
    text = parts.header + CHUNK_SEPARATOR.join(blocks) + parts.footer
    return ComposedContext(text=text, chunks_used=tuple(used), truncated=truncated)


def hard_truncate(text: str, room: int) -> str | None:
    """``text`` shortened to at most ``room`` characters ending in ``...``.

    The text is cut to ``room - 3`` characters; if the cut's last space is past 70 % of its
    length, the cut ends there instead (trailing whitespace dropped). ``None`` when
    ``room - 3 < 1`` (no room for even one character) or ``text`` is empty.
    """
    keep = room - len(ELLIPSIS)
    if keep < 1 or not text:
        return None
    cut = text[:keep]
    space = cut.rfind(" ")
    if space > SPACE_CUT_RATIO * len(cut):
        cut = cut[:space].rstrip()
    return cut + ELLIPSIS


def _block(parts: Template, source: str, text: str) -> str:
    return f"[{parts.source_label}: {source}]\n{text}"
