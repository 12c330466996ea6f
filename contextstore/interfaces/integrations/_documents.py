"""What the framework adapters share about the knowledge base: how a document's text comes
back from its passages, the metadata key the vector store keeps its vectors under, and
metadata filters evaluated in Python with the knowledge base's semantics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contextstore.core.knowledge import Document

# The vector store's embedding of a document, kept in its metadata: the knowledge base holds
# no caller-supplied vector of its own. Never shown in a returned document's metadata.
VECTOR_KEY: Final = "langchain_embedding"


def document_text(document: Document) -> str:
    """The text a document was stored with, as the knowledge base keeps it: stripped, and a
    long text as its passages (paragraph packs) separated by a blank line."""
    return "\n\n".join(document.passages)


def visible_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` without the adapters' own key."""
    return {key: value for key, value in metadata.items() if key != VECTOR_KEY}


def matches(metadata: Mapping[str, Any], checked: Mapping[str, tuple[Any, ...]]) -> bool:
    """Whether ``metadata`` passes every filter (checked by ``validate_filters``) the way a
    knowledge-base search does: the key
    present with one of the values; numbers by value, a bool only a bool, a string only a
    string, ``None`` a null."""
    return all(
        key in metadata and any(_same(metadata[key], option) for option in options)
        for key, options in checked.items()
    )


def _same(actual: Any, wanted: Any) -> bool:
    if wanted is None or actual is None:
        return actual is None and wanted is None
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return isinstance(wanted, bool) and isinstance(actual, bool) and actual == wanted
    if isinstance(wanted, str) or isinstance(actual, str):
        return isinstance(wanted, str) and isinstance(actual, str) and actual == wanted
    if isinstance(wanted, int | float) and isinstance(actual, int | float):
        return bool(actual == wanted)
    return False
