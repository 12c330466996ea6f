"""Embedders that load models or call services, and the registry of embedder names.

A namespace records its embedder by name; ``embedder_named`` turns the name back into an
embedder in any process:

* ``"hashing"``: ``core.embedding.HashingEmbedder`` (no dependency, the default);
* ``"wordllama"``: ``WordLlamaEmbedder`` (``pip install 'contextstore[embeddings]'``, offline);
* ``"openai:<model>"``: ``OpenAIEmbedder`` against ``base_url`` (default: the environment's
  ``OPENAI_BASE_URL``, else OpenAI's API) with ``api_key`` (default ``OPENAI_API_KEY``);
* ``"none"`` (or ``None``): no embedder, lexical search only.

Imports only the core (the pure ``Embedder`` protocol and ``HashingEmbedder`` live there).
"""

from __future__ import annotations

import os

from contextstore.backends.embedders.openai import EmbeddingError, OpenAIEmbedder
from contextstore.backends.embedders.wordllama import WordLlamaEmbedder
from contextstore.core.embedding import Embedder, HashingEmbedder
from contextstore.errors import ValidationError

__all__ = [
    "EMBEDDER_NAMES",
    "EmbeddingError",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
    "embedder_named",
]

EMBEDDER_NAMES = ("hashing", "wordllama", "openai:<model>", "none")
"""The embedder names a namespace may record."""


def embedder_named(
    name: str | None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    dim: int | None = None,
) -> Embedder | None:
    """The embedder ``name`` stands for, or ``None`` for ``"none"``/``None``.

    ``dim`` sets the hashing and WordLlama dimensions and the dimension an OpenAI-compatible
    model must return. An unknown name raises ``ValidationError("embedder")`` listing the
    names that exist; ``"wordllama"`` without its extra raises ``MissingExtraError``.
    """
    if name is None:
        return None
    if not isinstance(name, str):
        raise ValidationError("embedder", f"must be a name, got {type(name).__name__}")
    cleaned = name.strip()
    lowered = cleaned.lower()
    if lowered == "none":
        return None
    if lowered == "hashing":
        return HashingEmbedder() if dim is None else HashingEmbedder(dim)
    if lowered == "wordllama":
        return WordLlamaEmbedder() if dim is None else WordLlamaEmbedder(dim)
    if lowered.startswith("openai:") and cleaned[len("openai:") :].strip():
        return OpenAIEmbedder(
            cleaned[len("openai:") :].strip(),
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1",
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
            dim=dim,
        )
    raise ValidationError(
        "embedder", f"unknown embedder {name!r}; expected one of {', '.join(EMBEDDER_NAMES)}"
    )
