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

__all__ = ["contains", "lesson_usage", "unnest"]


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


def _unnested(
    dialect: str, column: Any, conditions: Sequence[sa.ColumnElement[bool]], included: bool
) -> sa.Select[Any]:
    """One row per (selected run, lesson id in ``column``), flagged matched or included."""
    each = unnest(dialect, column, "included_each" if included else "matched_each")
    flag = sa.literal(1 if included else 0, sa.Integer())
    return (
        sa.select(
            each.c.value.label("lesson_id"),
            (1 - flag).label("matched"),
            flag.label("included"),
            (QueryMetricRow.recorded_at if included else sa.null()).label("included_at"),
        )
        .select_from(sa.join(QueryMetricRow, each, sa.true()))
        .where(*conditions)
    )


def lesson_usage(dialect: str, conditions: Sequence[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """Per lesson: ``entity_id``, ``status`` (now; null once deleted), ``runs_matched``,
    ``runs_included``, ``last_included_at`` and ``used`` (1 when some selected run matched or
    included it), for every lesson the selected runs name and every active lesson; most
    included first, then most matched, then entity id.

    One statement, reading the selected rows twice (once per array): the two unnested
    arrays are stacked and grouped once, and the active lessons missing from that grouping
    are appended with zero counts.
    """
    stacked = sa.union_all(
        _unnested(dialect, QueryMetricRow.lessons_matched_ids, conditions, included=False),
        _unnested(dialect, QueryMetricRow.lessons_included_ids, conditions, included=True),
    ).subquery("stacked")
    usage = (
        sa.select(
            stacked.c.lesson_id,
            sa.func.sum(stacked.c.matched).label("runs_matched"),
            sa.func.sum(stacked.c.included).label("runs_included"),
            sa.func.max(stacked.c.included_at).label("last_included_at"),
        )
        .group_by(stacked.c.lesson_id)
        .cte("usage")
    )
    used = sa.select(
        usage.c.lesson_id.label("entity_id"),
        LessonRow.status.label("status"),
        usage.c.runs_matched,
        usage.c.runs_included,
        sa.type_coerce(usage.c.last_included_at, QueryMetricRow.recorded_at.type).label(
            "last_included_at"
        ),
        sa.literal(1, sa.Integer()).label("used"),
    ).select_from(usage.outerjoin(LessonRow, LessonRow.entity_id == usage.c.lesson_id))
    unused = sa.select(
        LessonRow.entity_id,
        LessonRow.status,
        sa.literal(0, sa.Integer()),
        sa.literal(0, sa.Integer()),
        sa.null(),
        sa.literal(0, sa.Integer()),
    ).where(
        LessonRow.status == "active",
        ~sa.exists(sa.select(sa.literal(1)).where(usage.c.lesson_id == LessonRow.entity_id)),
    )
    both = sa.union_all(used, unused).subquery("lesson_usage")
    return sa.select(both).order_by(
        both.c.runs_included.desc(), both.c.runs_matched.desc(), both.c.entity_id
    )
