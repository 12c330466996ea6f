"""The agent frameworks' adapters, by the names users import:

- ``contextstore.integrations.langchain``: ``ContextStoreRetriever`` (a ``BaseRetriever``) and
  ``ContextStoreVectorStore`` (a ``VectorStore``); extra ``langchain``.
- ``contextstore.integrations.llamaindex``: ``ContextStoreRetriever`` (a ``BaseRetriever``)
  and ``ContextStoreLessonBlock`` (a ``Memory`` block); extra ``llamaindex``.
- ``contextstore.integrations.langgraph``: ``ContextStoreStore`` (a ``BaseStore``) and
  ``context_node``; extra ``langgraph``.

Each module re-exports its adapter from ``contextstore.interfaces.integrations``, where the
code lives among the other interfaces, and imports its framework only when it is itself
imported: this package imports none. A missing framework is a ``MissingExtraError`` naming
the extra to install.
"""
