"""Metrics in SQL: the repository (``repository``), what a report reads (``queries``), the
statements' pieces (``figures``), one ``MetricsStrategy`` per database (``sqlite``,
``postgresql``), and the figures returned (``report``), with the rows' validation
(``validation``) and namespaces (``tenancy``).

The names callers import from ``contextstore.backends.sql.metrics`` stay here.
"""

from __future__ import annotations

from contextstore.backends.sql.errors import translate_metrics_error
from contextstore.backends.sql.metrics.report import (
    PERCENTILES,
    ComplexityRow,
    GroupRow,
    LessonStats,
    LessonUsage,
    MetricsFigures,
    MetricsFilter,
    MetricsFilterFields,
    MetricsReport,
    SeriesPoint,
    percentile,
)
from contextstore.backends.sql.metrics.repository import MetricsRepository, rows_parameters

__all__ = [
    "PERCENTILES",
    "ComplexityRow",
    "GroupRow",
    "LessonStats",
    "LessonUsage",
    "MetricsFigures",
    "MetricsFilter",
    "MetricsFilterFields",
    "MetricsReport",
    "MetricsRepository",
    "SeriesPoint",
    "percentile",
    "rows_parameters",
    "translate_metrics_error",
]
