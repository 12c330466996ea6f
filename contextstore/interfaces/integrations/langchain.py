"""LangChain over the knowledge base: ``ContextStoreRetriever`` and ``ContextStoreVectorStore``.

Both are built from a store, so every process of a fleet reads and writes the same SQL::

    store = contextstore.connect()
    retriever = ContextStoreRetriever(store=store, top_k=4)
    docs = retriever.invoke("How do I fail over Postgres?")

The retriever is the knowledge base's own hybrid search (BM25, fused with cosine when the
store embeds): passages sharing a term with the query, best first. Each LangChain document
is one passage: ``id`` ``"<source>#<passage>"``, metadata the document's plus ``source``,
``passage`` and ``score``. An ``AsyncStore`` is accepted for ``ainvoke``.

The vector store keeps one knowledge-base document per LangChain document (``id`` is the
source, under an optional ``source_prefix``) with the caller's embedding in its metadata,
and ranks by exact cosine over the vectors of its documents (one SQL read of the metadata,
then one per returned document). Its documents are ordinary knowledge-base documents:
``build_context`` and the retriever find them too. A text comes back as the knowledge base
keeps it (stripped; a long one as its passages separated by blank lines).

Requires ``pip install 'contextstore[langchain]'``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Self

import numpy as np

from contextstore.core.knowledge import Document as StoredDocument
from contextstore.core.knowledge import validate_document, validate_filters
from contextstore.core.ranking import unit_rows, unit_vector
from contextstore.errors import MissingExtraError, NotFoundError, ValidationError
from contextstore.interfaces.integrations._documents import (
    VECTOR_KEY,
    document_text,
    matches,
    visible_metadata,
)
from contextstore.store.aio import AsyncStore
from contextstore.store.sync import Store

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover (the extra is installed where tests run)
    raise MissingExtraError("The LangChain integration", "langchain-core", "langchain") from exc

__all__ = ["ContextStoreRetriever", "ContextStoreVectorStore"]


def _chunk_document(chunk: Any) -> Document:
    metadata = visible_metadata(chunk.metadata)
    metadata.update(source=chunk.source, score=float(chunk.score))
    return Document(
        page_content=chunk.text,
        metadata=metadata,
        id=f"{chunk.source}#{metadata.get('passage', 0)}",
    )


class ContextStoreRetriever(BaseRetriever):
    """The knowledge base's search as a LangChain retriever.

    ``top_k`` passages (``invoke(query, top_k=…)`` overrides it), kept by ``filters`` on the
    document metadata (``invoke(query, filters=…)`` replaces them): ``{"team": "ops"}``, a
    list for any of several values. Bad arguments raise ``ValidationError`` naming them.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Store | AsyncStore
    top_k: int = 4
    filters: dict[str, Any] | None = None

    def _arguments(self, top_k: int | None, filters: dict[str, Any] | None) -> tuple[int, Any]:
        top_k = self.top_k if top_k is None else top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValidationError("top_k", f"must be an integer >= 1, got {top_k!r}")
        return top_k, self.filters if filters is None else filters

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> list[Document]:
        if isinstance(self.store, AsyncStore):
            raise ValidationError("store", "an AsyncStore is searched with ainvoke, not invoke")
        top_k, filters = self._arguments(top_k, filters)
        return [_chunk_document(c) for c in self.store.knowledge.search(query, top_k, filters)]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> list[Document]:
        top_k, filters = self._arguments(top_k, filters)
        if isinstance(self.store, AsyncStore):
            chunks = await self.store.knowledge.search(query, top_k, filters)
        else:
            chunks = await asyncio.to_thread(self.store.knowledge.search, query, top_k, filters)
        return [_chunk_document(chunk) for chunk in chunks]


class ContextStoreVectorStore(VectorStore):
    """A LangChain vector store kept in the knowledge base of ``store``.

    ``embedding`` embeds texts and queries; ``source_prefix`` keeps this store's documents
    apart from others of the namespace (an id ``x`` is the source ``<prefix>x``). Scores are
    cosine similarities in [-1, 1], higher is closer; ``filter`` keeps documents whose
    metadata matches, as the knowledge base's filters do.
    """

    def __init__(self, *, store: Store, embedding: Embeddings, source_prefix: str = "") -> None:
        self.store = store
        self.embedding = embedding
        self.source_prefix = source_prefix

    @property
    def embeddings(self) -> Embeddings:
        return self.embedding

    def _source(self, document_id: str) -> str:
        return f"{self.source_prefix}{document_id}"

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Store the texts (an existing id is replaced) in one transaction; their ids."""
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        ids = [item or uuid.uuid4().hex for item in ids] if ids else []
        ids += [uuid.uuid4().hex for _ in texts[len(ids) :]]
        if not len(texts) == len(metadatas) == len(ids):
            raise ValidationError("metadatas", "texts, metadatas and ids must have one length")
        vectors = self.embedding.embed_documents(texts) if texts else []
        documents = [
            validate_document(
                text,
                self._source(document_id),
                {**metadata, VECTOR_KEY: [float(x) for x in vector]},
                where=f"texts[{index}].",
            )
            for index, (text, metadata, document_id, vector) in enumerate(
                zip(texts, metadatas, ids, vectors, strict=True)
            )
        ]
        self.store.knowledge.import_documents(documents)
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the documents of ``ids``; ids that are not stored are ignored."""
        for document_id in ids or []:
            try:
                self.store.knowledge.delete(self._source(document_id))
            except NotFoundError:
                continue
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents among ``ids``, in that order (unknown ids left out)."""
        found: list[Document] = []
        for document_id in ids:
            try:
                stored = self.store.knowledge.get(self._source(document_id))
            except NotFoundError:
                continue
            found.append(self._document(document_id, stored))
        return found

    def _document(self, document_id: str, stored: StoredDocument) -> Document:
        return Document(
            id=document_id,
            page_content=document_text(stored),
            metadata=visible_metadata(stored.metadata),
        )

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents closest to ``query``, closest first, with their cosine."""
        return self.similarity_search_by_vector_with_score(
            self.embedding.embed_query(query), k, filter
        )

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        return [document for document, _ in self.similarity_search_with_score(query, k, filter)]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        pairs = self.similarity_search_by_vector_with_score(embedding, k, filter)
        return [document for document, _ in pairs]

    def similarity_search_by_vector_with_score(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None
    ) -> list[tuple[Document, float]]:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValidationError("k", f"must be an integer >= 1, got {k!r}")
        checked = validate_filters(filter)
        query = unit_vector(np.asarray(embedding, dtype=np.float64), len(embedding))
        listed = [
            document
            for document in self.store.knowledge.list(prefix=self.source_prefix or None)
            if isinstance(document.metadata.get(VECTOR_KEY), list)
            and len(document.metadata[VECTOR_KEY]) == len(embedding)
            and matches(document.metadata, checked)
        ]
        if query is None or not listed:
            return []
        vectors = unit_rows(np.asarray([d.metadata[VECTOR_KEY] for d in listed], np.float64))
        scores = vectors.astype(np.float64) @ query.astype(np.float64)
        # Closest first; equal scores in source order (the listing's), so results are stable.
        order = sorted(range(len(listed)), key=lambda i: -scores[i])[:k]
        found: list[tuple[Document, float]] = []
        for index in order:
            document_id = listed[index].source[len(self.source_prefix) :]
            found.extend((d, float(scores[index])) for d in self.get_by_ids([document_id]))
        return found

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: (score + 1.0) / 2.0

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """A vector store on ``store=`` (a keyword argument) holding ``texts``."""
        store = kwargs.pop("store", None)
        if not isinstance(store, Store):
            raise ValidationError("store", "from_texts needs store=<a contextstore Store>")
        vectorstore = cls(store=store, embedding=embedding, **kwargs)
        vectorstore.add_texts(texts, metadatas, ids=ids)
        return vectorstore
