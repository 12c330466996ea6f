"""Checks that keep a bad ``QueryMetric`` or filter out of ``query_metrics``.

Every value is checked against the schema's limits before a statement is built, so a bad
value is refused with its field's name (``ValidationError``) instead of surfacing as a driver
error, or being silently truncated by a lenient database, and so SQLite and PostgreSQL refuse
the same values.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from contextstore.backends.sql.metrics.report import COMPLEXITY_ORDER, MetricsFilter
from contextstore.core.analysis import QueryIntent
from contextstore.core.filters import optional_choice, optional_instant
from contextstore.core.metrics import QueryMetric, RunTrace
from contextstore.errors import ValidationError

__all__ = ["INTENTS", "TEXT_LIMITS", "aware", "bound", "checked_text", "resolve", "row_values"]

# Column limits from the schema.
TEXT_LIMITS = {"namespace": 128, "worker": 128, "query_hash": 32, "intent": 16}
INT_FIELDS = (
    "budget",
    "context_length",
    "chunk_count",
    "lessons_matched",
    "lessons_included",
)
INT32_MAX = 2**31 - 1
INTENTS: Final = tuple(intent.value for intent in QueryIntent)
"""The intents a run may have, as ``report(intent=...)`` takes them."""


def aware(name: str, value: object) -> datetime:
    """``value`` in UTC; ``ValidationError`` naming ``name`` unless an aware ``datetime``."""
    if not isinstance(value, datetime):
        raise ValidationError(name, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(name, "must be timezone-aware (naive datetimes are ambiguous)")
    return value.astimezone(UTC)


def checked_text(name: str, value: object, *, limit: int | None, required: bool) -> str:
    """``value`` unchanged if it is a string PostgreSQL and SQLite both store as given.

    ``ValidationError`` naming ``name`` for a non-string, an empty string when ``required``,
    more than ``limit`` characters, a NUL character or a lone surrogate.
    """
    if not isinstance(value, str):
        raise ValidationError(name, f"must be a string, got {type(value).__name__}")
    if required and not value:
        raise ValidationError(name, "must not be empty")
    if limit is not None and len(value) > limit:
        raise ValidationError(name, f"must be at most {limit} characters, got {len(value)}")
    # PostgreSQL refuses both in text; refuse them everywhere so both databases agree.
    if "\x00" in value:
        raise ValidationError(name, "must not contain NUL characters")
    if value.isascii():  # answered without a scan; ASCII holds no surrogate
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(name, "is not valid Unicode (lone surrogate)") from exc
    return value


def row_values(metric: QueryMetric) -> dict[str, Any]:
    """The INSERT values of one metric, or ``ValidationError`` naming the first bad field."""
    if not isinstance(metric, QueryMetric):
        raise ValidationError("metric", f"must be a QueryMetric, got {type(metric).__name__}")
    values: dict[str, Any] = {"recorded_at": aware("recorded_at", metric.recorded_at)}
    for name, limit in TEXT_LIMITS.items():
        values[name] = checked_text(name, getattr(metric, name), limit=limit, required=True)
    if metric.complexity not in COMPLEXITY_ORDER:
        raise ValidationError(
            "complexity", f"must be one of {', '.join(COMPLEXITY_ORDER)}, got {metric.complexity!r}"
        )
    values["complexity"] = metric.complexity
    for name in INT_FIELDS:
        number = getattr(metric, name)
        if isinstance(number, bool) or not isinstance(number, int):
            raise ValidationError(name, f"must be an integer, got {type(number).__name__}")
        if not 0 <= number <= INT32_MAX:
            raise ValidationError(name, f"must be between 0 and {INT32_MAX}, got {number}")
        values[name] = number
    if metric.lessons_included > metric.lessons_matched:
        raise ValidationError(
            "lessons_included",
            f"cannot exceed lessons_matched ({metric.lessons_included} > {metric.lessons_matched})",
        )
    response = metric.response_ms
    if isinstance(response, bool) or not isinstance(response, int | float):
        raise ValidationError("response_ms", f"must be a number, got {type(response).__name__}")
    if not math.isfinite(response) or response < 0:
        raise ValidationError("response_ms", f"must be finite and ≥ 0, got {response!r}")
    values["response_ms"] = float(response)
    for name in ("guard_passed", "cache_hit"):
        flag = getattr(metric, name)
        if not isinstance(flag, bool):
            raise ValidationError(name, f"must be a bool, got {type(flag).__name__}")
        values[name] = flag
    warnings = metric.guard_warnings
    if isinstance(warnings, str) or not isinstance(warnings, tuple | list):
        raise ValidationError("guard_warnings", "must be a tuple of strings")
    values["guard_warnings"] = [
        checked_text("guard_warnings", warning, limit=None, required=False) for warning in warnings
    ]
    values["query"] = (
        None
        if metric.query is None
        else checked_text("query", metric.query, limit=None, required=False)
    )
    values.update(trace_values(metric.trace))
    return values


# RunTrace field → query_metrics column.
TRACE_COLUMNS = {
    "scope_entity_ids": "scope_entity_ids",
    "scope_tags": "scope_tags",
    "lessons_matched": "lessons_matched_ids",
    "lessons_included": "lessons_included_ids",
    "chunk_sources": "chunk_sources",
}


def trace_values(trace: object) -> dict[str, list[str]]:
    """The trace's columns as JSON lists; ``ValidationError`` naming ``trace.<field>``."""
    if not isinstance(trace, RunTrace):
        raise ValidationError("trace", f"must be a RunTrace, got {type(trace).__name__}")
    values: dict[str, list[str]] = {}
    for name, column in TRACE_COLUMNS.items():
        items = getattr(trace, name)
        field = f"trace.{name}"
        if isinstance(items, str) or not isinstance(items, tuple | list):
            raise ValidationError(field, "must be a tuple of strings")
        values[column] = [checked_text(field, item, limit=None, required=False) for item in items]
    return values


def resolve(filters: MetricsFilter, now: datetime) -> MetricsFilter:
    """``filters`` with its instants resolved against ``now`` (``24h``, ISO 8601 text, a
    ``timedelta``: see ``contextstore.core.filters``) and its choices in their stored
    spelling; ``ValidationError`` naming the field for a value that is neither."""
    return replace(
        filters,
        since=optional_instant("since", filters.since, now),
        until=optional_instant("until", filters.until, now),
        complexity=optional_choice("complexity", filters.complexity, COMPLEXITY_ORDER),
        intent=optional_choice("intent", filters.intent, INTENTS),
    )


def bound(value: object) -> datetime | None:
    """A bound of a resolved ``MetricsFilter``: an aware ``datetime`` or ``None``."""
    assert value is None or isinstance(value, datetime)
    return value
