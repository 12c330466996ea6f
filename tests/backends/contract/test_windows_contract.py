"""The adaptive Windows contract (docs/design/cache-and-windows.md), run on every backend through
``windows_harness``.

Values are chosen so every mean is exact in binary floating point, whatever the backend's
summation order.
"""

from __future__ import annotations

from contextstore.backends.windows import (
    EMPTY_SUMMARY,
    WINDOW,
    AsyncWindows,
    Sample,
    Windows,
    WindowSummary,
)
from tests.harness import WindowsHarness


def sample(i: int) -> Sample:
    """The i-th sample of a known sequence: the guard fails on every multiple of 4."""
    return Sample(
        response_ms=float(i),
        context_length=2 * i,
        chunk_count=i % 5,
        guard_passed=i % 4 != 0,
    )


def test_window_is_one_hundred() -> None:
    assert WINDOW == 100


def test_empty_windows_summarise_to_zeros(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    interface = AsyncWindows if windows_harness.backend.endswith("-async") else Windows
    assert isinstance(getattr(windows, "target", windows), interface)
    assert windows.window == WINDOW
    assert windows.summary() == EMPTY_SUMMARY


def test_record_returns_incrementing_totals(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    totals = [windows.record(sample(i)).total_queries for i in range(1, 26)]
    assert totals == list(range(1, 26))
    assert windows.summary().total_queries == 25


def test_record_returns_the_summary_including_that_sample(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    first = windows.record(Sample(120.0, 400, 3, True))
    assert first == WindowSummary(1, 1, 120.0, 400.0, 3.0, 0.0)
    second = windows.record(Sample(80.0, 200, 1, False))
    assert second == WindowSummary(2, 2, 100.0, 300.0, 2.0, 0.5)
    assert windows.summary() == second


def test_summary_changes_nothing(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    windows.record(sample(3))
    assert windows.summary() == windows.summary()
    assert windows.record(sample(5)).total_queries == 2


def test_windows_keep_only_the_newest_hundred(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    for i in range(150):
        windows.record(sample(i))
    # Samples 50..149 remain: response 99.5, length 199.0, chunks i % 5 evenly → 2.0, and
    # 25 multiples of 4 (52, 56, …, 148) failed.
    assert windows.summary() == WindowSummary(
        total_queries=150,
        samples=100,
        avg_response_ms=99.5,
        avg_context_length=199.0,
        avg_chunk_count=2.0,
        guard_failure_rate=0.25,
    )


def test_fractional_response_times_average_exactly(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    for ms in (0.5, 1.25, 2.25):
        windows.record(Sample(ms, 10, 1, True))
    assert windows.summary().avg_response_ms == 4.0 / 3


def test_guard_failure_rate_is_exact(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    for i in range(10):
        windows.record(Sample(10.0, 100, 2, guard_passed=i >= 3))
    assert windows.summary().guard_failure_rate == 0.3
    windows.record(Sample(10.0, 100, 2, guard_passed=False))
    assert windows.summary().guard_failure_rate == 4 / 11


def test_all_failures_and_all_passes(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    for _ in range(WINDOW):
        windows.record(Sample(1.0, 1, 1, guard_passed=False))
    assert windows.summary().guard_failure_rate == 1.0
    for _ in range(WINDOW):
        windows.record(Sample(1.0, 1, 1, guard_passed=True))
    assert windows.summary().guard_failure_rate == 0.0


def test_clear_resets_samples_and_total(windows_harness: WindowsHarness) -> None:
    windows = windows_harness.make()
    for i in range(30):
        windows.record(sample(i))
    windows.clear()
    assert windows.summary() == EMPTY_SUMMARY
    assert windows.record(Sample(7.0, 70, 7, True)) == WindowSummary(1, 1, 7.0, 70.0, 7.0, 0.0)


def test_instances_share_state_exactly_when_the_backend_is_shared(
    windows_harness: WindowsHarness,
) -> None:
    first = windows_harness.make()
    second = windows_harness.make()
    first.record(Sample(10.0, 100, 1, True))
    after = second.record(Sample(30.0, 300, 3, False))
    if windows_harness.shared:
        assert after == WindowSummary(2, 2, 20.0, 200.0, 2.0, 0.5)
        assert first.summary() == after
        second.clear()
        assert first.summary() == EMPTY_SUMMARY
    else:
        assert after == WindowSummary(1, 1, 30.0, 300.0, 3.0, 1.0)
        assert first.summary() == WindowSummary(1, 1, 10.0, 100.0, 1.0, 0.0)
