"""Retrieval: the ``Retriever`` protocols, sync and async, and the in-memory hybrid retriever.

``InMemoryRetriever`` keeps documents in process memory, split into passages, and ranks
them by BM25 over a sparse term–passage matrix, optionally fused with the cosine similarity
of an ``embed_fn`` (for example ``HashingEmbedder()``). Text becomes terms through an
analyzer (``analyzers``: ``simple`` by default, or ``english``).

Scoring, for the query's distinct terms ``t`` (the analyzer's ``query_terms``: stop words
dropped, at most the first 64), each with its weight ``q(t)`` (1, or with the ``english``
analyzer how often ``t`` occurs in the query), and a passage ``d``::

    idf(t)    = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
    bm25(d)   = Σ_t q(t) · idf(t) · tf(t, d) · (k1 + 1)
                    / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))

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

Search modes: ``hybrid`` (the default) is the above; ``lexical`` is ``bm25(d)`` alone;
``vector`` is ``cos(d)`` alone over the passages the filters allow.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from contextstore.core.analysis import QueryAnalysis
from contextstore.core.analyzers import Analyzer, analyzer_named
from contextstore.core.compose import Chunk
from contextstore.core.embedding import EmbedFn, HashingEmbedder, embed_texts
from contextstore.core.passage_index import (
    Index,
    Passage,
    eligible_passages,
    ranked_chunks,
)
from contextstore.core.passages import DEFAULT_PASSAGE_CHARS, split_passages
from contextstore.core.ranking import (
    Candidate,
    CorpusStatistics,
    RankingParameters,
    average_length,
    cosine,
    fuse,
    rank,
    saturation,
    unit_rows,
    unit_vector,
)
from contextstore.core.tokens import tokenize
from contextstore.core.topk import TermPostings, full_scores
from contextstore.errors import ValidationError

__all__ = [
    "DEFAULT_PASSAGE_CHARS",
    "SEARCH_MODES",
    "EmbedFn",
    "InMemoryRetriever",
    "Retriever",
    "SearchMode",
    "VersionedRetriever",
    "split_passages",
    "tokenize",
]

logger = logging.getLogger(__name__)

SearchMode = Literal["hybrid", "lexical", "vector"]
SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "lexical", "vector")


def search_mode(mode: object) -> SearchMode:
    """``mode`` checked: one of ``SEARCH_MODES``, else ``ValidationError("mode")``."""
    for known in SEARCH_MODES:
        if mode == known:
            return known
    raise ValidationError("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")


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
        filters: Mapping[str, object] | None = None,
    ) -> list[Chunk]: ...


@runtime_checkable
class VersionedRetriever(Retriever, Protocol):
    """A retriever whose corpus has a generation: a number that grows with every change.

    The engine stores the generation a context was composed at in its cache entry and treats
    an entry of another generation as a miss, so no process is served a context composed from
    an older corpus. ``generation`` must be cheap (one small read).
    """

    def generation(self) -> int: ...


@runtime_checkable
class AsyncRetriever(Protocol):
    """``Retriever`` for an event loop (``AsyncKnowledgeBase`` implements it)."""

    async def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis,
        top_k: int,
        filters: Mapping[str, object] | None = None,
    ) -> list[Chunk]: ...


@runtime_checkable
class AsyncVersionedRetriever(AsyncRetriever, Protocol):
    """``VersionedRetriever`` for an event loop: ``generation()`` is awaited."""

    async def generation(self) -> int: ...


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
    * ``analyzer``: ``"simple"`` (default), ``"english"`` or an ``Analyzer``; documents and
      queries go through the same one.
    * ``mode``: the default search mode, ``"hybrid"``, ``"lexical"`` or ``"vector"`` (see the
      module docstring); ``retrieve(mode=...)`` overrides it per query. ``hybrid`` without an
      ``embed_fn`` is ``lexical``; ``vector`` without one raises ``ValidationError("mode")``.

    ``keyword_weight`` must be in ``[0, 1]``, ``k1 >= 0``, ``b`` in ``[0, 1]`` and
    ``max_passage_chars >= 1``, else ``ValidationError``. See the module docstring for the
    scoring formula; the scoring itself is ``contextstore.core.ranking``'s, shared with the SQL
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
        analyzer: str | Analyzer = "simple",
        mode: SearchMode = "hybrid",
    ) -> None:
        if not 0.0 <= keyword_weight <= 1.0:
            raise ValidationError("keyword_weight", f"must be in [0, 1], got {keyword_weight!r}")
        if not (k1 >= 0.0 and math.isfinite(k1)):
            raise ValidationError("k1", f"must be a finite number >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise ValidationError("b", f"must be in [0, 1], got {b!r}")
        if max_passage_chars < 1:
            raise ValidationError("max_passage_chars", f"must be >= 1, got {max_passage_chars}")
        self._analyzer = analyzer_named(analyzer)
        self._mode = self._checked_mode(mode, embed_fn)
        self._embed_fn = embed_fn
        self._keyword_weight = float(keyword_weight)
        self._k1 = float(k1)
        self._b = float(b)
        self._max_passage_chars = max_passage_chars
        self._lexical_only = lexical_only
        self._lock = threading.Lock()
        self._passages: list[Passage] = []
        # Embeddings survive rebuilds: only passages added since the last build are embedded.
        self._vectors: list[NDArray[np.float64] | None] = []
        self._index: Index | None = None

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer documents and queries go through."""
        return self._analyzer

    def configure(
        self, analyzer: str | Analyzer | None = None, embedder: Any = "unchanged"
    ) -> None:
        """Analyse and embed every passage again, in process: ``analyzer`` ``None`` keeps the
        current one; ``embedder`` an ``Embedder``, ``"hashing"``, or ``None``/``"none"`` for
        lexical only (left out: kept). Other registry names are built with
        ``contextstore.backends.embedders.embedder_named`` and passed as an ``Embedder``.
        A bad value raises ``ValidationError`` naming the field, and nothing changes."""
        chosen = self._analyzer if analyzer is None else analyzer_named(analyzer)
        embed_fn = (
            self._embed_fn
            if isinstance(embedder, str) and embedder == "unchanged"
            else _embedder_named(embedder)
        )
        mode = self._checked_mode(self._mode, embed_fn)
        with self._lock:
            if chosen is not self._analyzer:
                self._passages = [
                    _reanalysed(passage, chosen.terms(passage.text)) for passage in self._passages
                ]
            if embed_fn is not self._embed_fn:
                self._vectors = []
            self._analyzer, self._embed_fn, self._mode = chosen, embed_fn, mode
            self._index = None

    @staticmethod
    def _checked_mode(mode: object, embed_fn: EmbedFn | None) -> SearchMode:
        checked = search_mode(mode)
        if checked == "vector" and embed_fn is None:
            raise ValidationError("mode", "'vector' needs an embed_fn")
        return checked

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
        new: list[Passage] = []
        for number, passage in enumerate(split_passages(text, self._max_passage_chars)):
            tokens = self._analyzer.terms(passage)
            counts = Counter(tokens)
            new.append(
                Passage(
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
        *,
        mode: SearchMode | None = None,
    ) -> list[Chunk]:
        """Up to ``top_k`` chunks for ``query``, best first (see the class docstring).

        ``analysis`` is accepted for the ``Retriever`` protocol and not read: the query text
        goes through this retriever's analyzer. ``mode`` (default: the retriever's) is
        checked before anything else; an unknown one raises ``ValidationError("mode")``.
        """
        chosen = self._mode if mode is None else self._checked_mode(mode, self._embed_fn)
        if top_k <= 0:
            return []
        index = self._current_index()
        n = len(index.passages)
        if n == 0:
            return []

        eligible: NDArray[np.int64] | None = None
        if filters:
            eligible = eligible_passages(index, filters)
            if eligible.size == 0:
                return []

        weighted = self._analyzer.weighted_query_terms(query)
        terms = tuple(term for term, _ in weighted)
        weights = {term: count for term, count in weighted if count != 1} or None
        unit = None if chosen == "lexical" else self._query_vector(index.vectors, query)
        if unit is None:
            if chosen == "vector":
                return []  # the query could not be embedded: nothing is similar to it
            return self._lexical(index, index.postings(terms, weights), eligible, top_k)
        assert index.vectors is not None
        vectors = index.vectors if eligible is None else index.vectors[eligible]
        if chosen == "vector":
            return ranked_chunks(index.passages, eligible, cosine(vectors, unit), top_k)
        keyword = full_scores(index.postings(terms, weights), n)
        if self._lexical_only:
            return self._rank_matches(index, keyword, eligible, terms, weights, unit, top_k)
        scores = keyword if eligible is None else keyword[eligible]
        scores = fuse(scores, cosine(vectors, unit), self._keyword_weight)
        return ranked_chunks(index.passages, eligible, scores, top_k)

    @staticmethod
    def _lexical(
        index: Index,
        postings: Sequence[TermPostings],
        eligible: NDArray[np.int64] | None,
        top_k: int,
    ) -> list[Chunk]:
        """BM25 alone over every match.

        Scoring every posting is a numpy scatter-add of a few nanoseconds per posting; the
        exact pruning of ``topk`` measured slower in memory at every size up to 166k passages
        (``docs/benchmarks-retrieval.md``), so it is left to backends whose postings are
        costly to read.
        """
        keyword = full_scores(postings, len(index.passages))
        scores = keyword if eligible is None else keyword[eligible]
        return ranked_chunks(index.passages, eligible, scores, top_k)

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
        index: Index,
        keyword: NDArray[np.float64],
        eligible: NDArray[np.int64] | None,
        terms: tuple[str, ...],
        weights: Mapping[str, int] | None,
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
        return rank(candidates, terms, statistics, parameters, top_k, unit, weights)

    def _current_index(self) -> Index:
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                self._index = self._build()
            return self._index

    def _build(self) -> Index:
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
        peaks = (
            np.maximum.reduceat(saturations, ptr[:-1])
            if saturations.size
            else np.zeros(0, dtype=np.float64)
        )

        return Index(
            passages=passages,
            vocabulary=vocabulary,
            ptr=ptr,
            docs=docs,
            saturations=saturations,
            peaks=peaks,
            total_length=total_length,
            vectors=self._embed_passages(passages) if self._embed_fn is not None else None,
        )

    def _embed_passages(self, passages: tuple[Passage, ...]) -> NDArray[np.float32] | None:
        """Embed passages added since the last build; return all, unit rows, as float32."""
        embed_fn = self._embed_fn
        assert embed_fn is not None
        fresh = [p.text for p in passages[len(self._vectors) :]]
        batch = embed_texts(embed_fn, fresh, logger)
        failures = sum(v is None for v in batch)
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


def _reanalysed(passage: Passage, tokens: list[str]) -> Passage:
    counts = Counter(tokens)
    return dataclasses.replace(
        passage, terms=tuple(counts), counts=tuple(counts.values()), length=len(tokens)
    )


def _embedder_named(embedder: object) -> EmbedFn | None:
    if embedder is None or (isinstance(embedder, str) and embedder.strip().lower() == "none"):
        return None
    if isinstance(embedder, str):
        if embedder.strip().lower() == "hashing":
            return HashingEmbedder()
        raise ValidationError(
            "embedder",
            f"{embedder!r} is not built here: pass an Embedder "
            "(contextstore.backends.embedders.embedder_named), 'hashing' or None",
        )
    if not callable(embedder):
        raise ValidationError("embedder", f"must be an Embedder, a name or None, got {embedder!r}")
    return embedder
