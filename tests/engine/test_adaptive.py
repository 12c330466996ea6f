"""AdaptiveLearningSystem on memory windows (docs/design/cache-and-windows.md)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.windows import Sample, Windows, WindowSummary
from contextstore.config import ContextEngineConfig
from contextstore.engine.adaptive import AdaptiveLearningSystem
from tests.factories import make_analysis

LOGGER = "contextstore.engine.adaptive"


class CountingWindows(Windows):
    """Memory windows that count calls, to pin down round trips."""

    def __init__(self) -> None:
        self.inner = MemoryWindows()
        self.records = 0
        self.summaries = 0

    def record(self, sample: Sample) -> WindowSummary:
        self.records += 1
        return self.inner.record(sample)

    def summary(self) -> WindowSummary:
        self.summaries += 1
        return self.inner.summary()

    def clear(self) -> None:
        self.inner.clear()


def make(enabled: bool = True) -> tuple[AdaptiveLearningSystem, CountingWindows]:
    windows = CountingWindows()
    system = AdaptiveLearningSystem(ContextEngineConfig(enable_adaptive=enabled), windows=windows)
    return system, windows


def record(
    system: AdaptiveLearningSystem,
    *,
    length: int = 500,
    chunks: int = 3,
    ms: float = 100.0,
    passed: bool = True,
) -> None:
    system.record("q", make_analysis(budget=2000), length, chunks, ms, passed)


def test_defaults_to_fresh_memory_windows() -> None:
    system = AdaptiveLearningSystem(ContextEngineConfig())
    assert isinstance(system.windows, MemoryWindows)
    assert AdaptiveLearningSystem.WINDOW == 100
    assert system.auto_tune_runs == 0
    other = AdaptiveLearningSystem(ContextEngineConfig())
    assert other.windows is not system.windows


def test_record_is_a_no_op_when_disabled() -> None:
    system, windows = make(enabled=False)
    for _ in range(40):
        record(system)
    assert windows.records == 0
    assert windows.inner.summary().total_queries == 0
    assert system.auto_tune_runs == 0


def test_record_calls_the_windows_once_with_the_sample() -> None:
    system, windows = make()
    system.record("q", make_analysis(budget=2000), 321, 4, 12.5, False)
    assert windows.records == 1
    assert windows.summaries == 0
    assert windows.inner.summary() == WindowSummary(1, 1, 12.5, 321.0, 4.0, 1.0)


@pytest.mark.parametrize(("records", "runs"), [(19, 0), (20, 1), (25, 1), (39, 1), (40, 2)])
def test_auto_tune_runs_once_every_twentieth_record(records: int, runs: int) -> None:
    system, windows = make()
    for _ in range(records):
        record(system)
    assert system.auto_tune_runs == runs
    assert windows.records == records


def test_auto_tune_follows_the_windows_total_not_local_calls() -> None:
    """With shared windows the fleet-wide total decides: here others already made 18."""
    system, windows = make()
    for _ in range(18):
        windows.inner.record(Sample(1.0, 1, 1, True))
    record(system)
    assert system.auto_tune_runs == 0
    record(system)
    assert system.auto_tune_runs == 1


def test_auto_tune_warns_above_thirty_percent_failures(caplog: pytest.LogCaptureFixture) -> None:
    system, _ = make()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for i in range(20):
        record(system, passed=i >= 7)  # 7 of 20 fail: 0.35
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].name == LOGGER
    assert "35.0%" in warnings[0].getMessage()


def test_auto_tune_is_silent_at_exactly_thirty_percent(caplog: pytest.LogCaptureFixture) -> None:
    system, _ = make()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for i in range(20):
        record(system, passed=i >= 6)  # 6 of 20 fail: exactly 0.3
    assert system.auto_tune_runs == 1
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_auto_tune_notes_slow_responses(caplog: pytest.LogCaptureFixture) -> None:
    system, _ = make()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(20):
        record(system, ms=2500.0)
    notes = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(notes) == 1
    assert "2500 ms" in notes[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_auto_tune_is_silent_at_exactly_two_seconds(caplog: pytest.LogCaptureFixture) -> None:
    system, _ = make()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(20):
        record(system, ms=2000.0)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_auto_tune_changes_no_setting() -> None:
    config = ContextEngineConfig()
    before = replace(config)
    system = AdaptiveLearningSystem(config)
    for _ in range(40):
        system.record("q", make_analysis(budget=2000), 50, 1, 5000.0, False)
    assert system.auto_tune_runs == 2
    assert config == before


@pytest.mark.parametrize(
    ("samples", "length", "budget", "expected"),
    [
        (9, 300, 2000, 2000),  # too few samples: the analysis budget
        (10, 300, 2000, 390),  # 300 < 1000: int(300 * 1.3)
        (10, 100, 2000, 200),  # int(130) is below the 200 floor
        (10, 1000, 2000, 2000),  # 1000 is not below half of 2000
        (10, 999, 2000, 1298),  # just below half: int(999 * 1.3) = int(1298.7)
        (150, 300, 800, 390),  # only the newest 100 count; still 300 on average
    ],
)
def test_suggest_budget(samples: int, length: int, budget: int, expected: int) -> None:
    system, windows = make()
    for _ in range(samples):
        record(system, length=length)
    windows.summaries = 0
    assert system.suggest_budget(make_analysis(budget=budget)) == expected
    assert windows.summaries == 1


def test_suggest_budget_uses_the_window_mean() -> None:
    system, _ = make()
    for length in (100, 200, 300, 400, 500) * 2:  # mean 300
        record(system, length=length)
    assert system.suggest_budget(make_analysis(budget=2000)) == 390


def test_suggest_budget_is_the_analysis_budget_when_disabled() -> None:
    system, windows = make(enabled=False)
    for _ in range(20):
        windows.inner.record(Sample(1.0, 300, 1, True))
    assert system.suggest_budget(make_analysis(budget=2000)) == 2000
    assert windows.summaries == 0


def test_performance_report_before_any_record() -> None:
    system, _ = make()
    # The metrics report's names, and null (not 0.0) for what is undefined without runs.
    assert system.get_performance_report() == {
        "runs": 0,
        "samples": 0,
        "mean_response_ms": None,
        "mean_context_length": None,
        "mean_chunk_count": None,
        "guard_failure_rate": None,
    }


def test_performance_report_values() -> None:
    system, windows = make()
    for i in range(120):
        # The newest 100 are i = 20..119: ms 100.0/300.0 alternating, lengths 2*i, chunks
        # 1 or 3, and every fifth fails.
        record(
            system,
            length=2 * i,
            chunks=1 + 2 * (i % 2),
            ms=100.0 + 200.0 * (i % 2),
            passed=i % 5 != 0,
        )
    windows.summaries = 0
    report = system.get_performance_report()
    assert windows.summaries == 1
    assert report == {
        "runs": 120,
        "samples": 100,
        "mean_response_ms": 200.0,
        "mean_context_length": 139.0,
        "mean_chunk_count": 2.0,
        "guard_failure_rate": 0.2,
    }
