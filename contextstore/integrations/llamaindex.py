"""LlamaIndex (``pip install 'contextstore[llamaindex]'``): a retriever over the knowledge base
and a ``Memory`` block with a scope's lesson block. See
``contextstore.interfaces.integrations.llamaindex``."""

from contextstore.interfaces.integrations.llamaindex import (
    ContextStoreLessonBlock,
    ContextStoreRetriever,
)

__all__ = ["ContextStoreLessonBlock", "ContextStoreRetriever"]
