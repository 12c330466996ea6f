"""The plain ports (``contextstore.engine.ports``): each backend called on its own.

``SeparateRunState`` composes any cache with any windows, ``SeparateRunReads`` any lesson
source with any retriever; the async classes do the same for an event loop. Every faster
implementation a store may choose instead is tested against these, run for run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

from contextstore.backends.cache import AsyncContextCache, ContextCache
from contextstore.backends.windows import AsyncWindows, Sample, Windows, WindowSummary
from contextstore.core.lessons import AsyncLessonSource, LessonSource
from contextstore.core.matching import Lesson, Scope
from contextstore.core.retrieval import (
    AsyncRetriever,
    AsyncVersionedRetriever,
    Retriever,
    VersionedRetriever,
)

__all__ = [
    "AsyncSeparateRunReads",
    "AsyncSeparateRunState",
    "SeparateRunReads",
    "SeparateRunState",
    "resolved",
]

T = TypeVar("T")


async def resolved(value: T | Awaitable[T]) -> T:
    """``value``, awaited when it is awaitable (a part that may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def has_keys(scope: Scope) -> bool:
    """Whether ``scope`` can match any lesson: one without ids or tags has no lookup key,
    so its candidates are ``[]`` without asking the lesson source."""
    return bool(scope.entity_ids or scope.tags)


class SeparateRunState:
    """``RunState`` over ``cache`` (``None``: nothing is cached) and ``windows``."""

    __slots__ = ("cache", "windows")

    def __init__(self, cache: ContextCache | None, windows: Windows) -> None:
        self.cache = cache
        self.windows = windows

    def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]:
        cached = None
        if cache_key is not None and self.cache is not None:
            cached = self.cache.get(cache_key)
        return cached, self.windows.summary() if want_summary else None

    def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None:
        if context is not None and cache_key is not None and self.cache is not None:
            self.cache.put(cache_key, context)
        return None if sample is None else self.windows.record(sample)


class AsyncSeparateRunState:
    """``AsyncRunState`` over ``cache`` (``None``: nothing is cached) and ``windows``."""

    __slots__ = ("cache", "windows")

    def __init__(self, cache: AsyncContextCache | None, windows: AsyncWindows) -> None:
        self.cache = cache
        self.windows = windows

    async def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]:
        cached = None
        if cache_key is not None and self.cache is not None:
            cached = await self.cache.get(cache_key)
        return cached, await self.windows.summary() if want_summary else None

    async def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None:
        if context is not None and cache_key is not None and self.cache is not None:
            await self.cache.put(cache_key, context)
        return None if sample is None else await self.windows.record(sample)


class SeparateRunReads:
    """``RunReads`` over ``lessons`` (``None``: no lessons) and ``retriever``: the
    candidates, then the generation when the retriever is a ``VersionedRetriever``."""

    __slots__ = ("_generation", "lessons")

    def __init__(self, lessons: LessonSource | None, retriever: Retriever) -> None:
        self.lessons = lessons
        self._generation: Callable[[], int] | None = (
            retriever.generation if isinstance(retriever, VersionedRetriever) else None
        )

    def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int | None]:
        candidates: list[Lesson] = []
        if self.lessons is not None and has_keys(scope):
            candidates = self.lessons.candidates(scope)
        return candidates, None if self._generation is None else self._generation()


class AsyncSeparateRunReads:
    """``AsyncRunReads`` over ``lessons`` and ``retriever``, each sync or async: the
    candidates, then the generation when the retriever has a ``generation()``."""

    __slots__ = ("_generation", "lessons")

    def __init__(
        self,
        lessons: AsyncLessonSource | LessonSource | None,
        retriever: AsyncRetriever | Retriever,
    ) -> None:
        self.lessons = lessons
        self._generation: Callable[[], Awaitable[int] | int] | None = None
        if isinstance(retriever, AsyncVersionedRetriever | VersionedRetriever):
            self._generation = retriever.generation

    async def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int | None]:
        candidates: list[Lesson] = []
        if self.lessons is not None and has_keys(scope):
            candidates = await resolved(self.lessons.candidates(scope))
        if self._generation is None:
            return candidates, None
        return candidates, await resolved(self._generation())
