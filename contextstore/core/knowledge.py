"""Knowledge documents as values: validation, the JSON Lines format, chunking, content hashes.

Pure: the SQL knowledge base (``contextstore.backends.sql.knowledge``) stores what this module
prepares, and the command line parses with it, so every entry point refuses the same input
the same way — a ``ValidationError`` naming the field (``text``, ``source``, ``metadata``,
``filters``) or the line (``line 3``, ``line 3.text``), before anything is written.

A document becomes passages exactly as ``InMemoryRetriever.add`` splits it
(``split_passages``), and each passage is counted by the retrievers' own tokenizer, keyed by
``index_term`` (what the database's full-text index stores).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from contextstore.core.analyzers import SIMPLE, Analyzer
from contextstore.core.embedding import EmbedFn, embed_texts
from contextstore.core.jsonl import Readable, jsonl_lines
from contextstore.core.ranking import unit_rows
from contextstore.core.retrieval import DEFAULT_PASSAGE_CHARS, split_passages
from contextstore.core.tokens import index_term, tokenize
from contextstore.core.validation import MAX_SQL_INTEGER, storable_text
from contextstore.errors import ValidationError

__all__ = [
    "MAX_FILTER_KEYS",
    "MAX_FILTER_KEY_LENGTH",
    "MAX_FILTER_VALUES",
    "MAX_SOURCE_LENGTH",
    "Document",
    "DocumentInput",
    "Passage",
    "content_hash",
    "embed_passages",
    "embedder_name",
    "parse_jsonl",
    "prepare_passages",
    "validate_document",
    "validate_filters",
]

logger = logging.getLogger(__name__)

# Characters; the width of documents.source.
MAX_SOURCE_LENGTH: Final = 1024
MAX_FILTER_KEYS: Final = 32
MAX_FILTER_VALUES: Final = 64
MAX_FILTER_KEY_LENGTH: Final = 255
"""Bounds on a search's metadata filters: each key and value is one condition of the
statement, and a database refuses a statement past a few hundred nested conditions."""
# Filter values the databases compare the way Python does (see validate_filters).
FilterValue = str | int | float | bool | None


@dataclass(frozen=True)
class DocumentInput:
    """A document to store: ``source`` names it within the namespace."""

    source: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.text, self.metadata)


@dataclass(frozen=True)
class Document:
    """A stored document: its passages (``get`` only; ``list`` leaves them empty).

    ``created_at`` never changes; ``updated_at`` moves when the text or metadata changes.
    """

    source: str
    metadata: Mapping[str, Any]
    content_hash: str
    chunk_count: int
    created_at: datetime
    updated_at: datetime
    passages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Passage:
    """One chunk as stored: ``counts`` maps index terms to occurrences, ``length`` in tokens."""

    position: int
    text: str
    length: int
    counts: Mapping[str, int]

    @property
    def terms(self) -> str:
        """The full-text index's input: the distinct index terms, space-separated."""
        return " ".join(self.counts)


def content_hash(text: str, metadata: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the text and the metadata (key order does not matter)."""
    canonical = json.dumps(
        {"text": text, "metadata": metadata}, ensure_ascii=False, sort_keys=True
    ).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()


def prepare_passages(
    text: str, max_chars: int = DEFAULT_PASSAGE_CHARS, analyzer: Analyzer = SIMPLE
) -> list[Passage]:
    """``text`` split and counted the way ``InMemoryRetriever.add`` does it with ``analyzer``."""
    passages = []
    for position, passage in enumerate(split_passages(text, max_chars)):
        tokens = tokenize(passage) if analyzer is SIMPLE else analyzer.terms(passage)
        counts = Counter(index_term(token) for token in tokens)
        passages.append(Passage(position, passage, len(tokens), dict(counts)))
    return passages


def _check_storable(value: str, field_name: str) -> None:
    storable_text(value, field_name)


def _check_json(value: Any, field_name: str) -> None:
    """Only what JSON holds and both databases store: str keys, finite numbers, no NUL."""
    if isinstance(value, str):
        _check_storable(value, field_name)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(field_name, f"{value!r} is not a JSON number")
    elif value is None or isinstance(value, bool | int):
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(field_name, f"key {key!r} is not a string")
            _check_storable(key, field_name)
            _check_json(item, field_name)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json(item, field_name)
    else:
        raise ValidationError(field_name, f"{type(value).__name__} is not a JSON value")


def validate_document(
    text: object, source: object, metadata: object = None, *, where: str = ""
) -> DocumentInput:
    """A checked ``DocumentInput``; ``where`` prefixes the field name (``"line 3."``).

    ``text``: a string with a non-blank character; ``source``: a non-blank string of at most
    ``MAX_SOURCE_LENGTH`` characters; ``metadata``: ``None`` (empty) or a JSON object (str
    keys; str, finite number, bool, null, list and object values). No NUL and no lone
    surrogate anywhere.
    """
    if not isinstance(source, str):
        raise ValidationError(f"{where}source", f"must be a string, got {type(source).__name__}")
    if not source.strip():
        raise ValidationError(f"{where}source", "must not be empty")
    if len(source) > MAX_SOURCE_LENGTH:
        raise ValidationError(f"{where}source", f"must be at most {MAX_SOURCE_LENGTH} characters")
    _check_storable(source, f"{where}source")
    if not isinstance(text, str):
        raise ValidationError(f"{where}text", f"must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValidationError(f"{where}text", "must not be empty")
    _check_storable(text, f"{where}text")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"{where}metadata", "must be a JSON object")
    _check_json(metadata, f"{where}metadata")
    return DocumentInput(source=source, text=text, metadata=dict(metadata))


def parse_jsonl(lines: Readable | Iterable[str | bytes]) -> list[DocumentInput]:
    """Documents from JSON Lines ``{"source", "text", "metadata"}``; blank lines are skipped.

    ``lines`` is a file or an iterable of lines (``contextstore.core.jsonl``: at most
    ``MAX_LINE_BYTES`` each). All or nothing: the first bad line raises ``ValidationError``
    naming it (``line 3`` for invalid UTF-8 or JSON or a line too long, ``line 3.text`` for
    a bad field), so a half-bad file is refused whole. A source given twice is refused on
    its second line. Other keys are ignored.
    """
    documents: list[DocumentInput] = []
    seen: dict[str, int] = {}
    for number, line in jsonl_lines(lines):
        where = f"line {number}"
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as error:
            raise ValidationError(where, f"is not valid JSON: {error}") from None
        except RecursionError:  # arrays or objects nested thousands deep
            raise ValidationError(where, "is nested too deeply to read") from None
        if not isinstance(data, dict):
            raise ValidationError(where, "must be a JSON object")
        document = validate_document(
            data.get("text"), data.get("source"), data.get("metadata"), where=f"{where}."
        )
        if document.source in seen:
            raise ValidationError(
                f"{where}.source",
                f"{document.source!r} already appears on line {seen[document.source]}",
            )
        seen[document.source] = number
        documents.append(document)
    return documents


def validate_filters(filters: object) -> dict[str, tuple[FilterValue, ...]]:
    """Metadata filters as ``{key: (allowed values...)}``, each key required to match one.

    A value may be a string, number, bool or ``None`` (the key present and null), or a list,
    tuple or set of those meaning "any of". Numbers compare by value (``1`` matches ``1.0``);
    a bool only matches a bool and a string only a string. Keys are non-empty strings without
    ``"`` or ``\\``, at most ``MAX_FILTER_KEY_LENGTH`` characters; at most
    ``MAX_FILTER_KEYS`` keys, each with at most ``MAX_FILTER_VALUES`` values; an integer is
    at most what a 64-bit column holds (``±(2**63 − 1)``). Anything else raises
    ``ValidationError("filters")``.
    """
    if filters is None:
        return {}
    if not isinstance(filters, Mapping):
        raise ValidationError("filters", f"must be a mapping, got {type(filters).__name__}")
    if len(filters) > MAX_FILTER_KEYS:
        raise ValidationError("filters", f"has {len(filters)} keys; the limit is {MAX_FILTER_KEYS}")
    checked: dict[str, tuple[FilterValue, ...]] = {}
    for key, wanted in filters.items():
        if not isinstance(key, str) or not key or '"' in key or "\\" in key:
            raise ValidationError(
                "filters", f"key {key!r} must be a non-empty string without quotes"
            )
        if len(key) > MAX_FILTER_KEY_LENGTH:
            raise ValidationError(
                "filters", f"a key is {len(key)} characters; the limit is {MAX_FILTER_KEY_LENGTH}"
            )
        _check_storable(key, "filters")
        options = tuple(wanted) if isinstance(wanted, list | tuple | set | frozenset) else (wanted,)
        if len(options) > MAX_FILTER_VALUES:
            raise ValidationError(
                "filters", f"{key}: {len(options)} values; the limit is {MAX_FILTER_VALUES}"
            )
        for option in options:
            if option is not None and not isinstance(option, str | int | float | bool):
                raise ValidationError(
                    "filters", f"{key}: {type(option).__name__} values cannot be compared in SQL"
                )
            if isinstance(option, int) and abs(option) > MAX_SQL_INTEGER:
                raise ValidationError(
                    "filters", f"{key}: {option} is wider than a 64-bit integer; give a float"
                )
            _check_json(option, "filters")
        checked[key] = options
    return checked


def embedder_name(embed_fn: EmbedFn) -> str:
    """What a chunk's ``embedder`` column records: the same for the same embedder everywhere.

    An explicit ``name`` attribute wins; then a ``repr`` of the embedder's own
    (``HashingEmbedder(dim=256)``); else the qualified name of its function or class.
    """
    name = getattr(embed_fn, "name", None)
    if isinstance(name, str) and name:
        return name[:255]
    kind = type(embed_fn)
    own_repr = kind.__dict__.get("__repr__") is not None or any(
        "__repr__" in base.__dict__ for base in kind.__mro__[1:-1]
    )
    if own_repr and not hasattr(embed_fn, "__code__"):
        return repr(embed_fn)[:255]
    target: Any = embed_fn if hasattr(embed_fn, "__qualname__") else kind
    return f"{target.__module__}.{target.__qualname__}"[:255]


def embed_passages(embed_fn: EmbedFn, texts: list[str]) -> list[NDArray[np.float32] | None]:
    """Unit float32 embeddings of ``texts`` (``None`` where the embedder failed).

    Batched through ``embed_fn.embed_many`` when it has one, else one call per text. Rows
    whose length differs from the most common one count as failures. Logs one warning per
    call when any text failed, never raises.
    """
    raw = embed_texts(embed_fn, texts, logger)
    dims = Counter(v.shape[0] for v in raw if v is not None and v.shape[0] > 0)
    if not dims:
        if texts:
            logger.warning("embed_fn failed on all %d passages; they rank by BM25", len(texts))
        return [None] * len(texts)
    dim = dims.most_common(1)[0][0]
    good = [i for i, v in enumerate(raw) if v is not None and v.shape == (dim,)]
    if len(good) < len(texts):
        logger.warning("embed_fn failed on %d of %d passages", len(texts) - len(good), len(texts))
    result: list[NDArray[np.float32] | None] = [None] * len(texts)
    if good:
        rows = unit_rows(np.stack([raw[i] for i in good]))  # type: ignore[misc]
        for row, i in zip(rows, good, strict=True):
            result[i] = row
    return result
