"""LangGraph (``pip install 'contextstore[langgraph]'``): a ``BaseStore`` in SQL shared by
every process, and a node that puts the lesson block and context into a graph's state. See
``contextstore.interfaces.integrations.langgraph``."""

from contextstore.interfaces.integrations.langgraph import (
    ContextState,
    ContextStoreStore,
    context_node,
)

__all__ = ["ContextState", "ContextStoreStore", "context_node"]
