"""A deterministic, dependency-light text embedder: signed feature hashing with numpy.

``HashingEmbedder`` is the library's default ``embed_fn``: the in-memory retriever fuses its
cosine similarity with BM25, and the guard's relevance check compares a query with its
context through it. It knows nothing about meaning, only about shared words and shared
character 3-grams, which is enough to tell "postgres failover" from "refund policy" and to
tolerate inflections ("rollback" / "rollbacks", "الاسترداد" / "استرداد") that exact keyword
matching misses.

Features of one text, after lower-casing and the analyzer's Arabic normalisation (diacritics
U+064B–U+0652 dropped, ``إأآ`` folded to ``ا``):

* every word ``[\\w\\u0600-\\u06FF]+`` (weight 1.0), and
* every character 3-gram of the word padded as ``<word>`` (weight 0.5 each).

A word that occurs ``c`` times counts ``1 + ln(c)`` (sublinear, so one repeated word cannot
dominate). Each feature is hashed with BLAKE2b (8-byte digest, stable across processes and
machines, unlike Python's salted ``hash``) into one of ``dim`` buckets with a sign taken from
the digest, so colliding features cancel on average instead of piling up. The vector is then
L2-normalised; cosine similarity of two embeddings is their dot product.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from contextstore.core.text import fold_arabic
from contextstore.errors import ValidationError

__all__ = ["DEFAULT_DIM", "Embedder", "HashingEmbedder", "embed_texts", "normalize_text"]

DEFAULT_DIM = 256

EmbedFn = Callable[[str], npt.ArrayLike]
"""Text → 1-D vector (anything ``numpy.asarray`` accepts); ``HashingEmbedder`` is one."""


@runtime_checkable
class Embedder(Protocol):
    """A named text embedder: what a namespace records and every retriever can fuse with.

    ``registry_name`` is the name that rebuilds it (``"hashing"``, ``"wordllama"``,
    ``"openai:<model>"``); ``dim`` the length of every vector. (It is not called ``name``:
    the knowledge base records an embedder by its ``repr``, which includes the dimension,
    unless it has a ``name``.) ``embedder(text)`` returns one
    float32 vector of shape ``(dim,)``; ``embed_many(texts)`` a float32 matrix ``(n, dim)``.
    Pure embedders live here; the ones that load models or call services live in
    ``contextstore.backends.embedders``.
    """

    @property
    def registry_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def __call__(self, text: str) -> NDArray[np.float32]: ...

    def embed_many(self, texts: Iterable[str]) -> NDArray[np.float32]: ...


_WORD = re.compile(r"[\w\u0600-\u06FF]+")
_WORD_WEIGHT = 1.0
_GRAM_WEIGHT = 0.5
# Distinct words seen by one embedder; past this the cache is dropped and rebuilt, which
# bounds memory in a long-lived process that sees unbounded vocabulary (user queries).
_MAX_CACHED_WORDS = 200_000


def embed_texts(
    embed_fn: EmbedFn, texts: list[str], logger: logging.Logger
) -> list[NDArray[np.float64] | None]:
    """The raw float64 embedding of each text, ``None`` where the embedder failed on it.

    Batched through ``embed_fn.embed_many`` when it has one and it returns one row a text;
    otherwise (no ``embed_many``, it raised, or its shape is off) one call per text. Never
    raises; a failed batch is logged on ``logger`` (the caller's), once. Rows are not
    normalised and may differ in length: the caller decides which length wins.
    """
    raw: list[NDArray[np.float64] | None] = []
    embed_many = getattr(embed_fn, "embed_many", None)
    if texts and callable(embed_many):
        try:
            matrix = np.asarray(embed_many(texts), dtype=np.float64)
            if matrix.ndim == 2 and matrix.shape[0] == len(texts):
                raw = list(matrix)
        except Exception:
            logger.warning("embed_fn.embed_many failed; embedding one by one", exc_info=True)
    if texts and not raw:
        for text in texts:
            try:
                raw.append(np.asarray(embed_fn(text), dtype=np.float64).ravel())
            except Exception:
                raw.append(None)
    return raw


def normalize_text(text: str) -> str:
    """Lower-case, drop Arabic diacritics U+064B–U+0652 and fold ``إأآ`` to ``ا``.

    The same folding the query analyzer applies, so a query and a document written with
    and without tashkeel meet on the same features. Never raises; lone surrogates pass
    through unchanged.
    """
    return fold_arabic(text.lower())


def _stable_hash(feature: str) -> int:
    # surrogatepass: a lone surrogate is still a distinct, hashable feature, not an error.
    data = feature.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class HashingEmbedder:
    """Deterministic bag-of-features embedder; ``embedder(text)`` → float32 vector ``(dim,)``.

    * Same text → the same bytes, in every process and on every run (no salted hashing,
      no randomness, no model download).
    * Empty text, or text with no word characters (``"   "``, ``"!!!"``) → the zero vector.
    * Every other result has unit L2 norm (up to float32 rounding).
    * Never raises on any ``str``, lone surrogates and control characters included.
    * Thread-safe: the only shared state is a cache of per-word features, and a race on it
      only recomputes the same value.

    ``dim`` must be a positive ``int``, else ``ValidationError("dim")``. Larger ``dim`` means
    fewer hash collisions; 256 keeps a few thousand chunks in about a megabyte.
    """

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValidationError("dim", f"must be a positive integer, got {dim!r}")
        self._dim = dim
        self._cache: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}
        self._cache_lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        return self._dim

    @property
    def registry_name(self) -> str:
        """The registry name: ``"hashing"``."""
        return "hashing"

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"

    def __call__(self, text: str) -> NDArray[np.float32]:
        """Embed one text: float32, shape ``(dim,)``, unit norm or all zeros.

        This is the per-query path (retrieval, the guard), so it skips the batch machinery
        of ``embed_many``; both sum the same features in the same order.
        """
        words = _WORD.findall(normalize_text(text)) if isinstance(text, str) else []
        if not words:
            return np.zeros(self._dim, dtype=np.float32)
        counts = Counter(words)
        features = [self._features(word) for word in counts]
        lengths = [len(f[0]) for f in features]
        weights = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
        buckets = np.concatenate([f[0] for f in features])
        values = np.repeat(weights, lengths) * np.concatenate([f[1] for f in features])
        sums = np.bincount(buckets, weights=values, minlength=self._dim)
        norm = math.sqrt(float(np.dot(sums, sums)))
        vector: NDArray[np.float32] = (sums / norm if norm > 0.0 else sums).astype(np.float32)
        return vector

    def embed_many(self, texts: Iterable[str]) -> NDArray[np.float32]:
        """Embed many texts at once: float32, shape ``(n, dim)``; no texts → shape ``(0, dim)``.

        Row ``i`` equals ``self(texts[i])`` up to float rounding. The per-text work is one
        regex pass; features are looked up per distinct word (cached) and
        every bucket sum of the whole batch is a single ``numpy.bincount``.
        """
        texts = list(texts)
        n = len(texts)
        dim = self._dim
        if n == 0:
            return np.zeros((0, dim), dtype=np.float32)

        # One flat list of every word occurrence, each mapped to a batch-local word id
        # (first-seen order, so the result depends only on the texts); counting distinct
        # (row, word) pairs is then a single numpy.unique instead of a Counter per text.
        occurrences: list[str] = []
        row_lengths: list[int] = []
        for text in texts:
            words = _WORD.findall(normalize_text(text)) if isinstance(text, str) else []
            occurrences.extend(words)
            row_lengths.append(len(words))
        if not occurrences:
            return np.zeros((n, dim), dtype=np.float32)
        # dict.fromkeys and map run at C speed; a generator here costs half the batch time.
        vocabulary = {word: i for i, word in enumerate(dict.fromkeys(occurrences))}
        word_ids = np.array(list(map(vocabulary.__getitem__, occurrences)), dtype=np.int64)
        occurrence_rows = np.repeat(np.arange(n, dtype=np.int64), row_lengths)
        width = len(vocabulary)
        pair_keys, pair_counts = np.unique(occurrence_rows * width + word_ids, return_counts=True)
        pair_rows = pair_keys // width
        pair_words = pair_keys % width
        pair_weights = 1.0 + np.log(pair_counts.astype(np.float64))

        # A CSR layout of features per batch word: word j owns entries ptr[j]:ptr[j + 1].
        features = [self._features(word) for word in vocabulary]
        lengths = np.fromiter((len(f[0]) for f in features), dtype=np.int64, count=len(features))
        ptr = np.zeros(len(features) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        flat_buckets = np.concatenate([f[0] for f in features])
        flat_values = np.concatenate([f[1] for f in features])

        # Expand every (row, word, weight) pair into that word's features without a Python
        # loop: repeat each pair once per feature, then index the CSR arrays.
        per_pair = lengths[pair_words]
        total = int(per_pair.sum())
        starts = np.repeat(ptr[pair_words], per_pair)
        group_start = np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
        positions = starts + (np.arange(total, dtype=np.int64) - group_start)
        rows = np.repeat(pair_rows, per_pair)
        weights = np.repeat(pair_weights, per_pair)

        flat_index = rows * dim + flat_buckets[positions]
        sums = np.bincount(flat_index, weights=weights * flat_values[positions], minlength=n * dim)
        matrix = sums.reshape(n, dim)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        # A row whose features all cancelled (possible, if very unlikely) stays zero.
        safe = np.where(norms > 0.0, norms, 1.0)
        result: NDArray[np.float32] = (matrix / safe[:, None]).astype(np.float32)
        return result

    def _features(self, word: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Signed bucket indices and values of one word's features (cached per word)."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        padded = f"<{word}>"
        names = [f"w:{word}"] + [f"g:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
        base = [_WORD_WEIGHT] + [_GRAM_WEIGHT] * (len(names) - 1)
        hashes = [_stable_hash(name) for name in names]
        buckets = np.fromiter((h % self._dim for h in hashes), dtype=np.int64, count=len(names))
        # The top bit of the digest picks the sign, independent of the bucket bits.
        values = np.fromiter(
            (w if h >> 63 else -w for h, w in zip(hashes, base, strict=True)),
            dtype=np.float64,
            count=len(names),
        )
        entry = (buckets, values)
        with self._cache_lock:
            if len(self._cache) >= _MAX_CACHED_WORDS:
                self._cache.clear()
            self._cache[word] = entry
        return entry
