"""Retrieval: the ``Retriever`` protocol and the built-in in-memory hybrid retriever.

``InMemoryRetriever`` keeps documents in process memory, split into passages, and ranks
them by BM25 over a sparse term–passage matrix, optionally fused with the cosine similarity
of an ``embed_fn`` (for example ``HashingEmbedder()``).

Scoring, for the query's distinct terms ``t`` (stop words dropped unless nothing else is
left) and a passage ``d``::

    idf(t)    = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
    bm25(d)   = Σ_t idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))

``N`` counts every indexed passage and ``n_t`` those containing ``t`` (filters restrict which
passages may be returned, never the statistics); ``|d|`` is the passage's token count and
``avgdl`` the mean over the index. Without ``embed_fn`` the returned score is ``bm25(d)``.
With ``embed_fn`` both signals are min–max normalised over the passages the filters allow,
then mixed::

    cos(d)    = max(0, cosine(embed_fn(query), embed_fn(d)))
    norm(x)   = (x - lo) / (hi - lo)    hi = max x;  1.0 for all if hi == lo > 0, 0.0 if hi <= 0
                lo = min(cos) for cosine; lo = 0 for BM25
    score(d)  = w · norm(bm25)(d) + (1 - w) · norm(cos)(d)      with w = keyword_weight

and the returned score is that fused value, in ``[0, 1]``. BM25's minimum is pinned at 0,
the score of a passage sharing no term with the query (in any real index some passage
scores 0, so this is plain min–max there): otherwise the weakest keyword match among few
candidates would be normalised to 0 and, if it were also the least similar, dropped.
Cosine keeps the true minimum, which removes the similarity every text shares with every
other (hashed character n-grams overlap a little), so only relative closeness counts.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from contextstore.analysis import QueryAnalysis
from contextstore.compose import Chunk
from contextstore.embedding import EmbedFn
from contextstore.errors import ValidationError
from contextstore.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    average_length,
    cosine,
    fuse,
    idf,
    query_terms,
    rank,
    saturation,
    top_order,
    unit_rows,
    unit_vector,
)
from contextstore.tokens import tokenize

__all__ = [
    "DEFAULT_PASSAGE_CHARS",
    "EmbedFn",
    "InMemoryRetriever",
    "Retriever",
    "VersionedRetriever",
    "split_passages",
    "tokenize",
]

logger = logging.getLogger(__name__)


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


@runtime_checkable
class Retriever(Protocol):
    """Anything the engine can ask for knowledge chunks.

    ``retrieve`` returns at most ``top_k`` chunks, best first; ``filters`` (when given) keep
    only chunks whose metadata matches. It should not raise on any query string: the
    engine treats retrieval as best effort and composes whatever comes back.
    """

    def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis,
        top_k: int,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Chunk]: ...


@runtime_checkable
class VersionedRetriever(Retriever, Protocol):
    """A retriever whose corpus has a generation: a number that grows with every change.

    The engine stores the generation a context was composed at in its cache entry and treats
    an entry of another generation as a miss, so no process is served a context composed from
    an older corpus. ``generation`` must be cheap (one small read).
    """

    def generation(self) -> int: ...


@dataclass(frozen=True, slots=True)
class _Passage:
    text: str
    source: str
    position: int  # the passage's 0-based index in its document
    metadata: Mapping[str, Any]
    terms: tuple[str, ...]  # distinct tokens, in first-seen order
    counts: tuple[int, ...]  # how often each of them occurs
    length: int  # number of tokens


@dataclass(frozen=True, slots=True)
class _Index:
    """An immutable snapshot; retrieve() reads it without a lock."""

    passages: tuple[_Passage, ...]
    vocabulary: Mapping[str, int]
    # CSR over terms: term i's postings are docs[ptr[i]:ptr[i+1]] with BM25 tf-saturations
    # saturations[...]; a query is a sum of a few row slices, each times its term's idf.
    ptr: NDArray[np.int64]
    docs: NDArray[np.int64]
    saturations: NDArray[np.float64]
    total_length: int
    # Unit-normalised passage embeddings (zero rows where embedding failed); None = no fusion.
    # float32: half the memory, and a float32 matrix-vector product is also much faster.
    vectors: NDArray[np.float32] | None
    # Filled lazily per metadata key by _KeyPostings.of(); the snapshot's passages never
    # change, so a racing double fill computes the same value and is harmless.
    by_key: dict[str, _KeyPostings] = field(default_factory=dict)

    def frequency(self, term: str) -> int:
        """How many passages contain ``term``."""
        row = self.vocabulary.get(term)
        return 0 if row is None else int(self.ptr[row + 1] - self.ptr[row])


def _equal(actual: object, wanted: object) -> bool:
    try:
        return bool(actual == wanted)
    except Exception:  # an exotic __eq__ (an array, say) cannot match: not an error
        return False


@dataclass(frozen=True, slots=True)
class _KeyPostings:
    """Which passages carry each value of one metadata key, for filters without a scan."""

    by_value: Mapping[Any, NDArray[np.int64]]
    unhashable: tuple[int, ...]  # passages whose value cannot be a dict key (lists, ...)

    @staticmethod
    def of(index: _Index, key: str) -> _KeyPostings:
        cached = index.by_key.get(key)
        if cached is not None:
            return cached
        groups: dict[Any, list[int]] = {}
        unhashable: list[int] = []
        for number, passage in enumerate(index.passages):
            if key in passage.metadata:
                value = passage.metadata[key]
                try:
                    groups.setdefault(value, []).append(number)
                except TypeError:
                    unhashable.append(number)
        postings = _KeyPostings(
            by_value={v: np.asarray(ids, dtype=np.int64) for v, ids in groups.items()},
            unhashable=tuple(unhashable),
        )
        index.by_key[key] = postings
        return postings


def _eligible(index: _Index, filters: Mapping[str, Any]) -> NDArray[np.int64]:
    """Ascending passage numbers whose metadata satisfies every filter (see the class doc)."""
    mask = np.ones(len(index.passages), dtype=bool)
    for key, wanted in filters.items():
        options = wanted if isinstance(wanted, list | tuple | set | frozenset) else (wanted,)
        postings = _KeyPostings.of(index, key)
        allowed = np.zeros(len(index.passages), dtype=bool)
        for option in options:
            try:
                # Hashing agrees with == for well-behaved values (1 == 1.0 == True alike).
                found = postings.by_value.get(option)
            except Exception:  # an unhashable option: compare with every stored value
                for value, numbers in postings.by_value.items():
                    if _equal(value, option):
                        allowed[numbers] = True
            else:
                if found is not None:
                    allowed[found] = True
        for number in postings.unhashable:
            value = index.passages[number].metadata[key]
            if any(_equal(value, option) for option in options):
                allowed[number] = True
        mask &= allowed
    return np.flatnonzero(mask)


def _chunks(
    passages: Sequence[_Passage],
    eligible: NDArray[np.int64] | None,
    scores: NDArray[np.float64],
    top_k: int,
) -> list[Chunk]:
    """The best chunks; ``scores[i]`` belongs to passage ``eligible[i]`` (or ``i``)."""

    def passage(i: int) -> _Passage:
        return passages[i if eligible is None else int(eligible[i])]

    order = top_order(scores, lambda i: (passage(i).source, passage(i).position), top_k)
    # A fresh metadata dict: callers may mutate what they get without touching the index.
    return [
        Chunk(
            text=passage(i).text,
            source=passage(i).source,
            score=float(scores[i]),
            metadata=dict(passage(i).metadata),
        )
        for i in order
    ]


class InMemoryRetriever:
    """Hybrid BM25 (+ optional embedding cosine) retriever over documents held in memory.

    * ``add``/``add_documents`` split each document into passages (``split_passages``); each
      passage becomes a chunk whose metadata is a copy of the document's metadata plus
      ``"passage"`` (its 0-based index in the document, overriding a same-named key).
      Blank documents add nothing.
    * ``retrieve`` returns up to ``top_k`` chunks with a positive score, best first, in the
      total order of ``ranking.top_order`` (equal scores by source, then passage number, then
      insertion order); ``top_k <= 0``, an empty index, a blank query or filters nothing
      matches give ``[]``. It never raises on a query string: an ``embed_fn`` that raises or
      returns a vector of the wrong shape for the query is logged and the ranking falls back
      to BM25 alone; a passage whose embedding fails gets a zero vector.
    * ``filters``: a chunk is eligible only if, for every key, its metadata has the key and the
      value equals the filter value; a list/tuple/set filter value means "any of these".
      Keys are matched against metadata only (``source`` is not a metadata key).
    * Thread-safe: adds take a lock; the matrices are rebuilt lazily, under the same lock, on
      the first ``retrieve`` after an add, and queries then read an immutable snapshot.
      Embeddings are computed once per passage (batched through ``embed_fn.embed_many``
      when the callable has one).

    * ``lexical_only``: with an ``embed_fn``, fusion normally ranks every eligible passage, so
      one sharing no word with the query can still be found by similarity. ``True`` ranks
      only the passages sharing a term with the query (fusion then re-orders those), which
      is what a database's full-text index can find: with it the SQL knowledge base and
      this retriever agree even when fusing. Without an ``embed_fn`` it changes nothing.

    ``keyword_weight`` must be in ``[0, 1]``, ``k1 >= 0``, ``b`` in ``[0, 1]`` and
    ``max_passage_chars >= 1``, else ``ValidationError``. See the module docstring for the
    scoring formula; the scoring itself is ``contextstore.ranking``'s, shared with the SQL
    knowledge base.
    """

    def __init__(
        self,
        embed_fn: EmbedFn | None = None,
        *,
        keyword_weight: float = 0.6,
        k1: float = 1.5,
        b: float = 0.75,
        max_passage_chars: int = DEFAULT_PASSAGE_CHARS,
        lexical_only: bool = False,
    ) -> None:
        if not 0.0 <= keyword_weight <= 1.0:
            raise ValidationError("keyword_weight", f"must be in [0, 1], got {keyword_weight!r}")
        if not (k1 >= 0.0 and math.isfinite(k1)):
            raise ValidationError("k1", f"must be a finite number >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise ValidationError("b", f"must be in [0, 1], got {b!r}")
        if max_passage_chars < 1:
            raise ValidationError("max_passage_chars", f"must be >= 1, got {max_passage_chars}")
        self._embed_fn = embed_fn
        self._keyword_weight = float(keyword_weight)
        self._k1 = float(k1)
        self._b = float(b)
        self._max_passage_chars = max_passage_chars
        self._lexical_only = lexical_only
        self._lock = threading.Lock()
        self._passages: list[_Passage] = []
        # Embeddings survive rebuilds: only passages added since the last build are embedded.
        self._vectors: list[NDArray[np.float64] | None] = []
        self._index: _Index | None = None

    def __len__(self) -> int:
        """Number of indexed passages (chunks), not documents."""
        return len(self._passages)

    def add(self, text: str, source: str, metadata: Mapping[str, Any] | None = None) -> int:
        """Index one document; returns how many passages it became (0 for blank text)."""
        if not isinstance(text, str):
            raise ValidationError("text", f"must be a string, got {type(text).__name__}")
        if not isinstance(source, str):
            raise ValidationError("source", f"must be a string, got {type(source).__name__}")
        base = dict(metadata or {})
        new: list[_Passage] = []
        for number, passage in enumerate(split_passages(text, self._max_passage_chars)):
            tokens = tokenize(passage)
            counts = Counter(tokens)
            new.append(
                _Passage(
                    text=passage,
                    source=source,
                    position=number,
                    metadata={**base, "passage": number},
                    terms=tuple(counts),
                    counts=tuple(counts.values()),
                    length=len(tokens),
                )
            )
        if new:
            with self._lock:
                self._passages.extend(new)
                self._index = None
        return len(new)

    def add_documents(self, documents: Iterable[Mapping[str, Any] | Sequence[Any]]) -> int:
        """Index many documents; returns the number of passages added.

        Each document is a ``(text, source)`` or ``(text, source, metadata)`` sequence, or a
        mapping with ``text`` and ``source`` and optionally ``metadata`` (other keys are
        ignored). A malformed document raises ``ValidationError`` naming it; the documents
        before it stay indexed.
        """
        total = 0
        for position, document in enumerate(documents):
            if isinstance(document, Mapping):
                if "text" not in document or "source" not in document:
                    raise ValidationError(
                        f"documents[{position}]", "a mapping needs 'text' and 'source'"
                    )
                text, source, metadata = (
                    document["text"],
                    document["source"],
                    document.get("metadata"),
                )
            elif isinstance(document, Sequence) and not isinstance(document, str):
                if len(document) not in (2, 3):
                    raise ValidationError(
                        f"documents[{position}]", "expected (text, source[, metadata])"
                    )
                text, source = document[0], document[1]
                metadata = document[2] if len(document) == 3 else None
            else:
                raise ValidationError(
                    f"documents[{position}]", "expected a mapping or a (text, source) sequence"
                )
            if metadata is not None and not isinstance(metadata, Mapping):
                raise ValidationError(f"documents[{position}].metadata", "must be a mapping")
            total += self.add(text, source, metadata)
        return total

    def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Chunk]:
        """Up to ``top_k`` chunks for ``query``, best first (see the class docstring).

        ``analysis`` is accepted for the ``Retriever`` protocol and not read: the query text
        is tokenised here with the same normalisation the analyzer uses.
        """
        if top_k <= 0:
            return []
        index = self._current_index()
        n = len(index.passages)
        if n == 0:
            return []

        eligible: NDArray[np.int64] | None = None
        if filters:
            eligible = _eligible(index, filters)
            if eligible.size == 0:
                return []

        terms = query_terms(query)
        keyword = self._bm25(index, terms)
        unit = self._query_vector(index.vectors, query)
        if unit is not None and self._lexical_only:
            return self._rank_matches(index, keyword, eligible, terms, unit, top_k)
        scores = keyword if eligible is None else keyword[eligible]
        if unit is not None:
            assert index.vectors is not None
            vectors = index.vectors if eligible is None else index.vectors[eligible]
            scores = fuse(scores, cosine(vectors, unit), self._keyword_weight)
        return _chunks(index.passages, eligible, scores, top_k)

    def _bm25(self, index: _Index, terms: tuple[str, ...]) -> NDArray[np.float64]:
        scores = np.zeros(len(index.passages), dtype=np.float64)
        for term in terms:
            row = index.vocabulary.get(term)
            if row is not None:
                start, end = index.ptr[row], index.ptr[row + 1]
                weight = idf(len(index.passages), int(end - start))
                # A term's postings name each passage once, so fancy-index += is exact.
                scores[index.docs[start:end]] += weight * index.saturations[start:end]
        return scores

    def _query_vector(
        self, vectors: NDArray[np.float32] | None, query: str
    ) -> NDArray[np.float32] | None:
        if vectors is None:
            return None
        assert self._embed_fn is not None
        try:
            raw = self._embed_fn(query)
        except Exception:
            logger.warning("embed_fn failed on the query; ranking by BM25 only", exc_info=True)
            return None
        unit = unit_vector(raw, vectors.shape[1])
        if unit is None:
            logger.warning(
                "embed_fn returned shape %s for the query, passages have %s; BM25 only",
                np.shape(raw),
                (vectors.shape[1],),
            )
        return unit

    def _rank_matches(
        self,
        index: _Index,
        keyword: NDArray[np.float64],
        eligible: NDArray[np.int64] | None,
        terms: tuple[str, ...],
        unit: NDArray[np.float32],
        top_k: int,
    ) -> list[Chunk]:
        """Fusion over the lexical matches only, through the knowledge base's own ranking."""
        assert index.vectors is not None
        matched = np.flatnonzero(keyword > 0.0)
        if eligible is not None:
            matched = np.intersect1d(matched, eligible, assume_unique=True)
        wanted = set(terms)
        candidates = []
        for number in matched:
            passage = index.passages[int(number)]
            counts = {
                t: c for t, c in zip(passage.terms, passage.counts, strict=True) if t in wanted
            }
            candidates.append(
                Candidate(
                    text=passage.text,
                    source=passage.source,
                    position=passage.position,
                    length=passage.length,
                    counts=counts,
                    metadata=passage.metadata,
                    vector=index.vectors[int(number)],
                )
            )
        statistics = CorpusStatistics(
            count=len(index.passages),
            total_length=index.total_length,
            frequencies={t: index.frequency(t) for t in terms},
        )
        parameters = RankingParameters(self._k1, self._b, self._keyword_weight)
        return rank(candidates, terms, statistics, parameters, top_k, unit)

    def _current_index(self) -> _Index:
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                self._index = self._build()
            return self._index

    def _build(self) -> _Index:
        """Build the CSR term matrix (and embed new passages). Called with the lock held."""
        passages = tuple(self._passages)
        n = len(passages)
        # (term, passage, count) triples; dict.fromkeys and map keep the per-token work in C.
        all_terms = list(chain.from_iterable(p.terms for p in passages))
        vocabulary = {term: i for i, term in enumerate(dict.fromkeys(all_terms))}
        terms = np.fromiter(
            map(vocabulary.__getitem__, all_terms), dtype=np.int64, count=len(all_terms)
        )
        per_passage = np.fromiter((len(p.terms) for p in passages), dtype=np.int64, count=n)
        order = np.argsort(terms, kind="stable")
        docs = np.repeat(np.arange(n, dtype=np.int64), per_passage)[order]
        tf = np.fromiter(
            chain.from_iterable(p.counts for p in passages), dtype=np.float64, count=len(all_terms)
        )[order]
        df = np.bincount(terms, minlength=len(vocabulary)).astype(np.float64)
        ptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(df.astype(np.int64), out=ptr[1:])

        total_length = sum(p.length for p in passages)
        lengths = np.fromiter((p.length for p in passages), dtype=np.float64, count=n)
        avgdl = average_length(n, total_length)
        saturations = saturation(tf, lengths[docs], avgdl, self._k1, self._b)

        return _Index(
            passages=passages,
            vocabulary=vocabulary,
            ptr=ptr,
            docs=docs,
            saturations=saturations,
            total_length=total_length,
            vectors=self._embed_passages(passages) if self._embed_fn is not None else None,
        )

    def _embed_passages(self, passages: tuple[_Passage, ...]) -> NDArray[np.float32] | None:
        """Embed passages added since the last build; return all, unit rows, as float32."""
        embed_fn = self._embed_fn
        assert embed_fn is not None
        fresh = [p.text for p in passages[len(self._vectors) :]]
        batch: list[NDArray[np.float64] | None] = []
        embed_many = getattr(embed_fn, "embed_many", None)
        if fresh and callable(embed_many):
            try:
                matrix = np.asarray(embed_many(fresh), dtype=np.float64)
                if matrix.ndim == 2 and matrix.shape[0] == len(fresh):
                    batch = list(matrix)
            except Exception:
                logger.warning("embed_fn.embed_many failed; embedding one by one", exc_info=True)
        if fresh and not batch:
            failures = 0
            for text in fresh:
                try:
                    batch.append(np.asarray(embed_fn(text), dtype=np.float64).ravel())
                except Exception:
                    failures += 1
                    batch.append(None)
            if failures:
                # One line per build, not per passage: a dead model would flood the log.
                logger.warning(
                    "embed_fn failed on %d of %d passages; they get no embedding score",
                    failures,
                    len(fresh),
                )
        self._vectors.extend(batch)

        dims = Counter(v.shape[0] for v in self._vectors if v is not None)
        if not dims:
            return None
        # The most common length wins; a vector of another length is treated as missing.
        dim = dims.most_common(1)[0][0]
        zero = np.zeros(dim, dtype=np.float64)
        return unit_rows(
            np.stack([v if v is not None and v.shape == (dim,) else zero for v in self._vectors])
        )
