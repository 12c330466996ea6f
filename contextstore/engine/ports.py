"""The two ports a run does its I/O through, sync and async.

- **Run state**: the cache and the adaptive windows. The read phase fetches the cached entry
  and the windows' summary; the write phase caches the new entry and records the run's
  sample.
- **Run reads**: the lesson candidates of the run's scope and the knowledge generation of
  the retriever's corpus, both needed before a run can decide anything.

The engines call these and nothing else for them. The plain implementations
(``contextstore.engine.separate``) call each backend on its own; a store may hand an engine
faster ones over the same backends (one Redis script per phase, one SQL statement for both
reads), which answer every sequence of calls exactly as the plain ones do.
"""

from __future__ import annotations

from typing import Protocol

from contextstore.backends.windows import Sample, WindowSummary
from contextstore.core.matching import Lesson, Scope

__all__ = ["AsyncRunReads", "AsyncRunState", "RunReads", "RunState"]


class RunState(Protocol):
    """The cache and the windows as one run sees them. Faults never raise: a cache that
    cannot be reached misses, windows that cannot be reached fall back to process memory."""

    def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]:
        """(the text cached under ``cache_key``, ``None`` on a miss or without a key; the
        windows' summary, ``None`` unless ``want_summary``). Nothing is read for ``None``."""
        ...

    def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None:
        """Cache ``context`` under ``cache_key`` (when both are given) and record ``sample``
        (when given); the summary right after the record, ``None`` without a sample."""
        ...


class AsyncRunState(Protocol):
    """``RunState`` for an event loop: the same contract, awaited."""

    async def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]: ...

    async def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None: ...


class RunReads(Protocol):
    """What a run reads from durable storage before it can decide anything."""

    def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int | None]:
        """(the active lessons sharing a lookup key with ``scope``, ``[]`` for a scope
        without keys or without lessons; the retriever's knowledge generation, ``None`` for
        a retriever without one). Errors are the lesson source's and the retriever's."""
        ...


class AsyncRunReads(Protocol):
    """``RunReads`` for an event loop: the same contract, awaited."""

    async def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int | None]: ...
