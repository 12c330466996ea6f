"""SQL over the runs' traces: the JSON arrays of ``query_metrics`` unnested in the database.

PostgreSQL stores the arrays as ``jsonb`` and unnests them with ``jsonb_array_elements_text``
in a LATERAL join; SQLite stores JSON text and unnests it with ``json_each``, whose argument
may name a column of a table to its left. Either way the rows never come to Python: a report
grouped or filtered by lesson, and the lesson statistics, are one statement each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from contextstore.sql.models import LessonRow, QueryMetricRow

__all__ = ["contains", "lesson_usage", "unnest", "unused_lessons"]


def unnest(dialect: str, column: Any, name: str) -> sa.FromClause:
    """A table of one text column ``value``: the elements of the JSON array ``column``."""
    if dialect == "postgresql":
        return sa.func.jsonb_array_elements_text(column).table_valued("value").lateral(name)
    return sa.func.json_each(column).table_valued("value").alias(name)


def contains(dialect: str, column: Any, value: str) -> sa.ColumnElement[bool]:
    """True when the JSON array ``column`` holds the string ``value``."""
    if dialect == "postgresql":
        # Containment, not an unnest: the same answer, and an index on the column could serve it.
        held: sa.ColumnElement[bool] = column.op("@>", return_type=sa.Boolean())(
            sa.func.jsonb_build_array(sa.cast(value, sa.Text()))
        )
        return held
    each = unnest(dialect, column, "contains_each")
    return sa.exists(sa.select(sa.literal(1)).select_from(each).where(each.c.value == value))


def _per_lesson(
    dialect: str, column: Any, conditions: Sequence[sa.ColumnElement[bool]], name: str
) -> sa.Subquery:
    each = unnest(dialect, column, f"{name}_each")
    return (
        sa.select(
            each.c.value.label("lesson_id"),
            sa.func.count().label("runs"),
            sa.func.max(QueryMetricRow.recorded_at).label("last_at"),
        )
        .select_from(sa.join(QueryMetricRow, each, sa.true()))
        .where(*conditions)
        .group_by(each.c.value)
        .subquery(name)
    )


def lesson_usage(dialect: str, conditions: Sequence[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """(entity_id, status, runs_matched, runs_included, last_included_at) per lesson any
    selected run matched or included, most included first, then most matched, then id."""
    matched = _per_lesson(dialect, QueryMetricRow.lessons_matched_ids, conditions, "matched")
    included = _per_lesson(dialect, QueryMetricRow.lessons_included_ids, conditions, "included")
    # Both sides of the union: a hand-written row may include a lesson it does not list as
    # matched; it still counts.
    ids = sa.union(sa.select(matched.c.lesson_id), sa.select(included.c.lesson_id)).subquery("ids")
    runs_matched = sa.func.coalesce(matched.c.runs, 0)
    runs_included = sa.func.coalesce(included.c.runs, 0)
    return (
        sa.select(
            ids.c.lesson_id.label("entity_id"),
            LessonRow.status.label("status"),
            runs_matched.label("runs_matched"),
            runs_included.label("runs_included"),
            included.c.last_at.label("last_included_at"),
        )
        .select_from(ids)
        .outerjoin(matched, matched.c.lesson_id == ids.c.lesson_id)
        .outerjoin(included, included.c.lesson_id == ids.c.lesson_id)
        .outerjoin(LessonRow, LessonRow.entity_id == ids.c.lesson_id)
        .order_by(runs_included.desc(), runs_matched.desc(), ids.c.lesson_id)
    )


def unused_lessons(dialect: str, conditions: Sequence[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """The ids of the active lessons no selected run included, ascending."""
    each = unnest(dialect, QueryMetricRow.lessons_included_ids, "used_each")
    used = (
        sa.select(sa.literal(1))
        .select_from(sa.join(QueryMetricRow, each, sa.true()))
        .where(*conditions, each.c.value == LessonRow.entity_id)
    )
    return (
        sa.select(LessonRow.entity_id)
        .where(LessonRow.status == "active", ~sa.exists(used))
        .order_by(LessonRow.entity_id)
    )
