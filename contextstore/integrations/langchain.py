"""LangChain (``pip install 'contextstore[langchain]'``): a retriever over the knowledge base
and a vector store whose documents live in it. See
``contextstore.interfaces.integrations.langchain``."""

from contextstore.interfaces.integrations.langchain import (
    ContextStoreRetriever,
    ContextStoreVectorStore,
)

__all__ = ["ContextStoreRetriever", "ContextStoreVectorStore"]
