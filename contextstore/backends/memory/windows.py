"""In-process adaptive windows (docs/design/cache-and-windows.md), the default when no Redis URL is
set."""

from __future__ import annotations

import math
import threading
from collections import deque

from contextstore.backends.windows import WINDOW, AsyncWindows, Sample, Windows, WindowSummary

__all__ = ["AsyncMemoryWindows", "MemoryWindows"]


class MemoryWindows(Windows):
    """Four ``deque(maxlen=WINDOW)`` windows and a total, private to this process.

    Thread-safe: a record and the summary it returns are one atomic step, so concurrent
    records each see a distinct total. Means are recomputed from the windows on every call
    (at most ``WINDOW`` values each), never kept as running sums, so they carry no drift.
    ``response_ms`` is summed with ``math.fsum`` (correctly rounded); the other windows hold
    integers and sum exactly. An empty window's means are 0.0.
    """

    __slots__ = (
        "_chunk_counts",
        "_context_lengths",
        "_failures",
        "_lock",
        "_response_ms",
        "_total",
    )

    def __init__(self) -> None:
        self._response_ms: deque[float] = deque(maxlen=WINDOW)
        self._context_lengths: deque[int] = deque(maxlen=WINDOW)
        self._chunk_counts: deque[int] = deque(maxlen=WINDOW)
        self._failures: deque[int] = deque(maxlen=WINDOW)  # 1 when the guard failed, else 0
        self._total = 0
        self._lock = threading.Lock()

    def record(self, sample: Sample) -> WindowSummary:
        """Append ``sample``; return the summary including it and the new total."""
        with self._lock:
            self._response_ms.append(float(sample.response_ms))
            self._context_lengths.append(int(sample.context_length))
            self._chunk_counts.append(int(sample.chunk_count))
            self._failures.append(0 if sample.guard_passed else 1)
            self._total += 1
            return self._summarise()

    def summary(self) -> WindowSummary:
        """The current summary; changes nothing."""
        with self._lock:
            return self._summarise()

    def clear(self) -> None:
        """Forget every sample and reset the total to 0."""
        with self._lock:
            self._response_ms.clear()
            self._context_lengths.clear()
            self._chunk_counts.clear()
            self._failures.clear()
            self._total = 0

    def _summarise(self) -> WindowSummary:
        """Caller holds the lock. The four windows always hold the same number of samples."""
        n = len(self._response_ms)
        if n == 0:
            return WindowSummary(self._total, 0, 0.0, 0.0, 0.0, 0.0)
        return WindowSummary(
            total_queries=self._total,
            samples=n,
            avg_response_ms=math.fsum(self._response_ms) / n,
            avg_context_length=sum(self._context_lengths) / n,
            avg_chunk_count=sum(self._chunk_counts) / n,
            guard_failure_rate=sum(self._failures) / n,
        )


class AsyncMemoryWindows(AsyncWindows):
    """A ``MemoryWindows`` behind the async interface: in process, so nothing waits.

    ``windows`` is the memory windows it serves (new ones when omitted).
    """

    __slots__ = ("windows",)

    def __init__(self, windows: MemoryWindows | None = None) -> None:
        self.windows = windows if windows is not None else MemoryWindows()

    async def record(self, sample: Sample) -> WindowSummary:
        return self.windows.record(sample)

    async def summary(self) -> WindowSummary:
        return self.windows.summary()

    async def clear(self) -> None:
        self.windows.clear()
