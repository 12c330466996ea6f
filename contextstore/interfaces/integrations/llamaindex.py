"""LlamaIndex over a store: ``ContextStoreRetriever`` and ``ContextStoreLessonBlock``.

The retriever is the knowledge base's search returning ``NodeWithScore`` (one ``TextNode``
per passage: id ``"<source>#<passage>"``, metadata the document's plus ``source`` and
``passage``), sync and async, usable wherever LlamaIndex takes a retriever::

    store = contextstore.connect()
    retriever = ContextStoreRetriever(store=store, top_k=4)
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm)
    print(engine.query("How do I fail over Postgres?"))

Filters are the knowledge base's (``{"team": "ops"}``, a list for any of several values) or
LlamaIndex ``MetadataFilters`` joined by AND with ``==`` and ``in`` operators; any other
operator or condition is refused (``ValidationError("filters")``).

``ContextStoreLessonBlock`` is a ``Memory`` block holding the lesson block of a scope,
matched fresh on every read (an administrator's change shows on the next turn). Under
``order="relevance"`` the latest user message ranks the lessons.

Requires ``pip install 'contextstore[llamaindex]'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from contextstore.core.matching import MAX_K, MatchOptions, Scope
from contextstore.errors import MissingExtraError, ValidationError
from contextstore.interfaces.integrations._documents import visible_metadata
from contextstore.interfaces.results import match_candidates
from contextstore.store.aio import AsyncStore
from contextstore.store.sync import Store

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.memory import BaseMemoryBlock
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.core.vector_stores.types import (
        FilterCondition,
        FilterOperator,
        MetadataFilters,
    )
    from pydantic import Field
except ImportError as exc:  # pragma: no cover (the extra is installed where tests run)
    raise MissingExtraError("The LlamaIndex integration", "llama-index-core", "llamaindex") from exc

__all__ = ["ContextStoreLessonBlock", "ContextStoreRetriever"]

Filters = Mapping[str, Any] | MetadataFilters | None


def knowledge_filters(filters: Filters) -> Mapping[str, Any] | None:
    """LlamaIndex ``MetadataFilters`` as the knowledge base's filters (a mapping passes)."""
    if not isinstance(filters, MetadataFilters):
        return filters
    if filters.condition not in (None, FilterCondition.AND):
        raise ValidationError("filters", f"only AND is supported, not {filters.condition}")
    translated: dict[str, Any] = {}
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            raise ValidationError("filters", "nested filters are not supported")
        if item.operator is FilterOperator.EQ:
            translated[item.key] = item.value
        elif item.operator is FilterOperator.IN and isinstance(item.value, list):
            translated[item.key] = list(item.value)
        else:
            raise ValidationError(
                "filters", f"{item.key}: only == and in are supported, not {item.operator.value}"
            )
    return translated


def _node(chunk: Any) -> NodeWithScore:
    metadata = visible_metadata(chunk.metadata)
    metadata["source"] = chunk.source
    node = TextNode(
        id_=f"{chunk.source}#{metadata.get('passage', 0)}", text=chunk.text, metadata=metadata
    )
    return NodeWithScore(node=node, score=float(chunk.score))


class ContextStoreRetriever(BaseRetriever):
    """``top_k`` passages of the knowledge base for a query, best first, kept by ``filters``.

    ``store`` is a ``Store`` (both ``retrieve`` and ``aretrieve``) or an ``AsyncStore``
    (``aretrieve`` only; ``retrieve`` refuses it naming ``store``).
    """

    def __init__(
        self,
        *,
        store: Store | AsyncStore,
        top_k: int = 4,
        filters: Filters = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValidationError("top_k", f"must be an integer >= 1, got {top_k!r}")
        self.store = store
        self.top_k = top_k
        self.filters = knowledge_filters(filters)
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if isinstance(self.store, AsyncStore):
            raise ValidationError("store", "an AsyncStore is searched with aretrieve")
        chunks = self.store.knowledge.search(query_bundle.query_str, self.top_k, self.filters)
        return [_node(chunk) for chunk in chunks]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        if isinstance(self.store, AsyncStore):
            chunks = await self.store.knowledge.search(query, self.top_k, self.filters)
        else:
            search = self.store.knowledge.search
            chunks = await asyncio.to_thread(search, query, self.top_k, self.filters)
        return [_node(chunk) for chunk in chunks]


class ContextStoreLessonBlock(BaseMemoryBlock[str]):
    """The lesson block of a scope for ``Memory(memory_blocks=[...])``.

    ``tags`` and ``entity_ids`` are the agent's scope; ``k``, ``byte_budget`` and ``order``
    the matcher's options. Lessons are written by administrators (or proposed), never by the
    conversation: messages put into the block are ignored. Priority 0: never truncated.
    """

    store: Store | AsyncStore
    name: str = Field(default="lessons", description="The name of the memory block.")
    tags: tuple[str, ...] = ()
    entity_ids: tuple[str, ...] = ()
    k: int = Field(default=0, ge=0, le=MAX_K)
    byte_budget: int = Field(default=0, ge=0)
    order: str = "severity"
    accept_short_term_memory: bool = False

    async def _aget(self, messages: list[ChatMessage] | None = None, **kwargs: Any) -> str:
        scope = Scope(entity_ids=tuple(self.entity_ids), tags=tuple(self.tags))
        options = MatchOptions(self.k, self.byte_budget, self.order)
        if isinstance(self.store, AsyncStore):
            candidates = await self.store.lessons.candidates(scope)
        else:
            candidates = await asyncio.to_thread(self.store.lessons.candidates, scope)
        query = next(
            (m.content for m in reversed(messages or []) if m.role is MessageRole.USER), None
        )
        return match_candidates(candidates, scope, options, query).lesson_block

    async def _aput(self, messages: list[ChatMessage]) -> None:
        return None
