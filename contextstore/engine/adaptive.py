"""Adaptive learning over the last ``WINDOW`` runs (docs/design/cache-and-windows.md).

The system itself is stateless apart from an observability counter: every sample lives in
its ``Windows`` backend, so with Redis windows every process of a namespace learns from the
same history, and "every 20th record" is decided by the backend's shared total.
"""

from __future__ import annotations

import logging
import threading

from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.windows import WINDOW, Sample, Windows, WindowSummary
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import QueryAnalysis

__all__ = ["AdaptiveLearningSystem", "PerformanceReport", "performance_report"]

PerformanceReport = dict[str, float | int | None]
"""``runs``, ``samples``, ``mean_response_ms``, ``mean_context_length``, ``mean_chunk_count``
and ``guard_failure_rate``: see ``performance_report``."""

logger = logging.getLogger(__name__)

AUTO_TUNE_EVERY = 20  # records (fleet-wide with shared windows) between auto-tune reviews
MIN_SAMPLES = 10  # samples needed before suggest_budget trusts the history
FAILURE_RATE_ALERT = 0.3  # guard-failure rate above which auto-tune warns
SLOW_RESPONSE_MS = 2000.0  # mean response time above which auto-tune notes slowness
BUDGET_MARGIN = 1.3  # headroom over the mean context length in a suggested budget
BUDGET_FLOOR = 200  # smallest suggested budget, characters


class AdaptiveLearningSystem:
    """Records engine runs into rolling windows and suggests per-query context budgets.

    ``windows`` defaults to a fresh ``MemoryWindows`` (process-local). With
    ``config.enable_adaptive`` False, ``record`` does nothing and ``suggest_budget`` returns
    the analysis budget without reading the windows.
    """

    WINDOW = WINDOW

    def __init__(self, config: ContextEngineConfig, windows: Windows | None = None) -> None:
        self.config = config
        self.windows: Windows = windows if windows is not None else MemoryWindows()
        self.auto_tune_runs = 0  # how many times _auto_tune ran in this process
        self._runs_lock = threading.Lock()

    def record(
        self,
        query: str,
        analysis: QueryAnalysis,
        context_length: int,
        chunk_count: int,
        response_ms: float,
        guard_passed: bool,
    ) -> None:
        """Add one run to the windows (one ``windows.record`` call, one Redis round trip).

        ``query`` and ``analysis`` are accepted for a stable signature and not used
        (docs/decisions/0007).
        When the total returned by the windows is a multiple of 20, ``_auto_tune`` runs once
        here; with shared windows exactly one process of the fleet sees that total.
        """
        sample = self.sample(context_length, chunk_count, response_ms, guard_passed)
        if sample is not None:
            self.observe(self.windows.record(sample))

    def sample(
        self, context_length: int, chunk_count: int, response_ms: float, guard_passed: bool
    ) -> Sample | None:
        """The windows sample of one run; ``None`` when adaptive learning is off."""
        if not self.config.enable_adaptive:
            return None
        return Sample(
            response_ms=response_ms,
            context_length=context_length,
            chunk_count=chunk_count,
            guard_passed=guard_passed,
        )

    def observe(self, summary: WindowSummary) -> None:
        """React to the summary a record returned: auto-tune when its total is a multiple
        of 20 (fleet-wide with shared windows, so exactly one run of the fleet sees it)."""
        if summary.total_queries % AUTO_TUNE_EVERY == 0:
            self._auto_tune(summary)

    def _auto_tune(self, summary: WindowSummary) -> None:
        """Review the windows: log, never change a setting.

        WARNING when the guard-failure rate is strictly above 0.3; INFO when the mean
        response time is strictly above 2000 ms. Counts itself in ``auto_tune_runs``.
        """
        with self._runs_lock:
            self.auto_tune_runs += 1
        if summary.guard_failure_rate > FAILURE_RATE_ALERT:
            logger.warning(
                "adaptive: guard failure rate %.1f%% over the last %d runs exceeds %.0f%%; "
                "check retrieval quality and guard thresholds",
                100.0 * summary.guard_failure_rate,
                summary.samples,
                100.0 * FAILURE_RATE_ALERT,
            )
        if summary.avg_response_ms > SLOW_RESPONSE_MS:
            logger.info(
                "adaptive: mean response time %.0f ms over the last %d runs exceeds %.0f ms",
                summary.avg_response_ms,
                summary.samples,
                SLOW_RESPONSE_MS,
            )

    def suggest_budget(self, analysis: QueryAnalysis) -> int:
        """The context budget (characters) to use for this query.

        ``analysis.context_budget``, unless adaptive is on, the windows hold at least 10
        samples, and their mean context length is strictly below half that budget: then
        ``max(int(mean * 1.3), 200)``. The floor of 200 applies even when it exceeds a budget
        below 400 (the formula in docs/design/cache-and-windows.md). Reads the windows once, and not
        at all when adaptive is off.
        """
        if not self.config.enable_adaptive:
            return analysis.context_budget
        return self.budget_for(analysis, self.windows.summary())

    def budget_for(self, analysis: QueryAnalysis, summary: WindowSummary | None) -> int:
        """``suggest_budget``'s rule applied to a summary already read (pure).

        ``summary=None`` (adaptive off, or not read) gives the analysis budget.
        """
        base = analysis.context_budget
        if not self.config.enable_adaptive or summary is None:
            return base
        if summary.samples < MIN_SAMPLES or not summary.avg_context_length < base * 0.5:
            return base
        return max(int(summary.avg_context_length * BUDGET_MARGIN), BUDGET_FLOOR)

    def get_performance_report(self) -> PerformanceReport:
        """``performance_report`` of the windows, from one read."""
        return performance_report(self.windows.summary())


def performance_report(summary: WindowSummary) -> PerformanceReport:
    """The windows' figures under the names the metrics report gives the same figures:
    ``runs`` (every run recorded, fleet-wide with shared windows), ``samples`` (those in the
    window, at most ``WINDOW``) and the means over them, ``mean_response_ms``,
    ``mean_context_length``, ``mean_chunk_count``, and ``guard_failure_rate`` (a fraction).
    Before any run the means and the rate are ``None`` (undefined, not a misleading zero)."""
    empty = summary.samples == 0
    return {
        "runs": summary.total_queries,
        "samples": summary.samples,
        "mean_response_ms": None if empty else summary.avg_response_ms,
        "mean_context_length": None if empty else summary.avg_context_length,
        "mean_chunk_count": None if empty else summary.avg_chunk_count,
        "guard_failure_rate": None if empty else summary.guard_failure_rate,
    }
