"""The in-memory retriever's index: passages, a CSR term–passage matrix and metadata postings.

An ``Index`` is an immutable snapshot built from a list of ``Passage`` records; queries read
it without a lock. ``eligible_passages`` applies metadata filters through per-key postings, and
``ranked_chunks`` turns scored passages into ``Chunk`` results in the total order of ``top_order``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from contextstore.core.compose import Chunk
from contextstore.core.ranking import idf, top_order
from contextstore.core.topk import TermPostings

__all__ = ["Index", "KeyPostings", "Passage", "eligible_passages", "ranked_chunks"]


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    source: str
    position: int  # the passage's 0-based index in its document
    metadata: Mapping[str, Any]
    terms: tuple[str, ...]  # distinct tokens, in first-seen order
    counts: tuple[int, ...]  # how often each of them occurs
    length: int  # number of tokens


@dataclass(frozen=True, slots=True)
class Index:
    """An immutable snapshot; retrieve() reads it without a lock."""

    passages: tuple[Passage, ...]
    vocabulary: Mapping[str, int]
    # CSR over terms: term i's postings are docs[ptr[i]:ptr[i+1]] with BM25 tf-saturations
    # saturations[...]; a query is a sum of a few row slices, each times its term's idf.
    ptr: NDArray[np.int64]
    docs: NDArray[np.int64]
    saturations: NDArray[np.float64]
    # The largest saturation in each term's postings: its score bound for dynamic pruning.
    peaks: NDArray[np.float64]
    total_length: int
    # Unit-normalised passage embeddings (zero rows where embedding failed); None = no fusion.
    # float32: half the memory, and a float32 matrix-vector product is also much faster.
    vectors: NDArray[np.float32] | None
    # Filled lazily per metadata key by KeyPostings.of(); the snapshot's passages never
    # change, so a racing double fill computes the same value and is harmless.
    by_key: dict[str, KeyPostings] = field(default_factory=dict)

    def frequency(self, term: str) -> int:
        """How many passages contain ``term``."""
        row = self.vocabulary.get(term)
        return 0 if row is None else int(self.ptr[row + 1] - self.ptr[row])

    def postings(
        self, terms: Sequence[str], weights: Mapping[str, int] | None = None
    ) -> list[TermPostings]:
        """The postings of the query's ``terms`` present in the index, in query order.

        A term's impacts are ``(weight × idf) × saturation``, the products ``ranking.rank``
        adds up (``weights`` default to 1).
        """
        found = []
        count = len(self.passages)
        for term in terms:
            row = self.vocabulary.get(term)
            if row is None:
                continue
            start, end = int(self.ptr[row]), int(self.ptr[row + 1])
            weight = (1 if weights is None else weights.get(term, 1)) * idf(count, end - start)
            found.append(
                TermPostings(
                    docs=self.docs[start:end],
                    impacts=weight * self.saturations[start:end],
                    bound=weight * float(self.peaks[row]),
                )
            )
        return found


def _equal(actual: object, wanted: object) -> bool:
    try:
        return bool(actual == wanted)
    except Exception:  # an exotic __eq__ (an array, say) cannot match: not an error
        return False


@dataclass(frozen=True, slots=True)
class KeyPostings:
    """Which passages carry each value of one metadata key, for filters without a scan."""

    by_value: Mapping[Any, NDArray[np.int64]]
    unhashable: tuple[int, ...]  # passages whose value cannot be a dict key (lists, ...)

    @staticmethod
    def of(index: Index, key: str) -> KeyPostings:
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
        postings = KeyPostings(
            by_value={v: np.asarray(ids, dtype=np.int64) for v, ids in groups.items()},
            unhashable=tuple(unhashable),
        )
        index.by_key[key] = postings
        return postings


def eligible_passages(index: Index, filters: Mapping[str, Any]) -> NDArray[np.int64]:
    """Ascending passage numbers whose metadata satisfies every filter (see the class doc)."""
    mask = np.ones(len(index.passages), dtype=bool)
    for key, wanted in filters.items():
        options = wanted if isinstance(wanted, list | tuple | set | frozenset) else (wanted,)
        postings = KeyPostings.of(index, key)
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


def ranked_chunks(
    passages: Sequence[Passage],
    eligible: NDArray[np.int64] | None,
    scores: NDArray[np.float64],
    top_k: int,
) -> list[Chunk]:
    """The best chunks; ``scores[i]`` belongs to passage ``eligible[i]`` (or ``i``)."""

    def passage(i: int) -> Passage:
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
