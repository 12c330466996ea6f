"""Adapters for agent frameworks, each an optional extra: ``langchain`` (a retriever and a
vector store), ``langgraph`` (a store in SQL and a context node) and ``llamaindex`` (a
retriever and a memory block).

Each module imports its framework when it is itself imported, and only then; a missing
framework is a ``MissingExtraError`` naming the extra to install.
"""
