"""The adaptive windows interface: four rolling windows of the last ``WINDOW`` runs.

Contract (docs/design/cache-and-windows.md), for memory and Redis alike:
- ``record(sample)`` appends one run to the four windows (response ms, context length in
  characters, chunk count, guard failure), increments the total, and returns the summary as
  it stands right after this record — including ``total_queries``, the count that decides
  (fleet-wide, for shared backends) whether this was the 20th, 40th, … record.
- ``summary()`` reads the current summary without changing anything.
- ``clear()`` forgets every sample and resets the total.
Each window keeps the newest ``WINDOW`` samples; older ones fall out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

WINDOW = 100


@dataclass(frozen=True, slots=True)
class Sample:
    """One engine run as the windows see it."""

    response_ms: float
    context_length: int
    chunk_count: int
    guard_passed: bool


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """Means over the samples currently in the windows (0.0 when there are none)."""

    total_queries: int
    samples: int
    avg_response_ms: float
    avg_context_length: float
    avg_chunk_count: float
    guard_failure_rate: float


EMPTY_SUMMARY = WindowSummary(0, 0, 0.0, 0.0, 0.0, 0.0)


class Windows(ABC):
    """Storage for the adaptive rolling windows."""

    window: int = WINDOW

    @abstractmethod
    def record(self, sample: Sample) -> WindowSummary:
        """Append ``sample``; return the summary including this sample and the new total."""

    @abstractmethod
    def summary(self) -> WindowSummary:
        """The current summary."""

    @abstractmethod
    def clear(self) -> None:
        """Forget all samples and reset the total to 0."""


class AsyncWindows(ABC):
    """The ``Windows`` contract for an event loop: every call is awaited."""

    window: int = WINDOW

    @abstractmethod
    async def record(self, sample: Sample) -> WindowSummary:
        """Append ``sample``; return the summary including this sample and the new total."""

    @abstractmethod
    async def summary(self) -> WindowSummary:
        """The current summary."""

    @abstractmethod
    async def clear(self) -> None:
        """Forget all samples and reset the total to 0."""

    async def aclose(self) -> None:  # noqa: B027  (optional: most windows hold nothing)
        """Release what the windows hold (nothing, unless they made their own client)."""
