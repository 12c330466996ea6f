"""One run: the sans-I/O pipeline, the two ports its I/O goes through (``ports``), their
plain implementations (``separate``), and the sync and async drivers.

Imports the core, the backends' interfaces and the in-process memory backends (an engine's
defaults without a store); never Redis, SQL, the store or an interface.
"""

from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.sync import ContextEngine

__all__ = ["AsyncContextEngine", "ContextEngine"]
