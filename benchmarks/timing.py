"""Timing primitives: batches timed with ``perf_counter_ns``, interleaved, summarised by medians."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

Batch = Callable[[], object]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the collector out of a timed region (as ``timeit`` does); restore it after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_batch(batch: Batch) -> int:
    """Nanoseconds one call of ``batch`` takes, collector paused."""
    with gc_paused():
        start = time.perf_counter_ns()
        batch()
        return time.perf_counter_ns() - start


@dataclass(frozen=True)
class Comparison:
    """Per-round batch times (ns) of the measured code and its baseline, same rounds."""

    ours_ns: tuple[int, ...]
    base_ns: tuple[int, ...]
    ops: int  # operations per batch

    @property
    def ours_ops_per_s(self) -> float:
        return self.ops * 1e9 / statistics.median(self.ours_ns)

    @property
    def base_ops_per_s(self) -> float:
        return self.ops * 1e9 / statistics.median(self.base_ns)

    @property
    def ratio(self) -> float:
        """Throughput of ours over the baseline's (> 1: ours is faster)."""
        return self.ours_ops_per_s / self.base_ops_per_s


def compare(ours: Batch, base: Batch, *, ops: int, rounds: int, warmup: int = 1) -> Comparison:
    """Time ``ours`` and ``base`` in alternating order, ``rounds`` times each, after warm-ups.

    Alternating which one goes first cancels drift (a noisy neighbour, CPU frequency) that
    would otherwise favour whichever always ran second.
    """
    for _ in range(warmup):
        ours()
        base()
    ours_ns: list[int] = []
    base_ns: list[int] = []
    for round_number in range(rounds):
        if round_number % 2 == 0:
            ours_ns.append(time_batch(ours))
            base_ns.append(time_batch(base))
        else:
            base_ns.append(time_batch(base))
            ours_ns.append(time_batch(ours))
    return Comparison(tuple(ours_ns), tuple(base_ns), ops)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), of unsorted ``values``."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timed_call_ms(call: Callable[[], object]) -> float:
    """Milliseconds one call takes (collector paused)."""
    return time_batch(call) / 1e6


_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_queue_seconds() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux schedstat),
    or 0 where the kernel does not say. Subtracted from a wall-clock wait, it leaves what the
    thread itself did meanwhile (computing, or blocked in a call), not the machine's load."""
    try:
        return int(_SCHEDSTAT.read_bytes().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
