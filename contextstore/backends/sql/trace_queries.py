"""SQL over the runs' traces: the lessons each run named, in the database.

A lesson filter tests the JSON array ``lessons_included_ids`` itself
(``Dialect.json_array_holds``: containment of ``jsonb`` on PostgreSQL, JSON text unnested
with ``json_each`` on SQLite). The lesson statistics (and reports by lesson) read
``query_metric_lessons``, the arrays as rows that triggers keep (revision 0009). Either way
the rows never come to Python: each is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from contextstore.backends.sql.models import LessonRow, QueryMetricLessonRow, QueryMetricRow

__all__ = ["lesson_usage"]


def lesson_usage(conditions: Sequence[sa.ColumnElement[bool]]) -> sa.Select[Any]:
    """Per lesson: ``entity_id``, ``status`` (now; null once deleted), ``runs_matched``,
    ``runs_included``, ``last_included_at`` and ``used`` (1 when some selected run matched or
    included it), for every lesson the selected runs name and every active lesson; most
    included first, then most matched, then entity id.

    ``conditions`` select rows of ``query_metric_lessons`` (one per run and lesson it names,
    ``metrics.figures.filter_conditions(rows=RUN_LESSONS)``): one statement
    groups them in the order of its index, led by (namespace, lesson_id), so no run's JSON
    is read and nothing is sorted but the lessons; the active lessons missing from that
    grouping are appended with zero counts.
    """
    named = QueryMetricLessonRow
    usage = (
        sa.select(
            named.lesson_id,
            sa.func.sum(sa.case((named.matched, 1), else_=0)).label("runs_matched"),
            sa.func.sum(sa.case((named.included, 1), else_=0)).label("runs_included"),
            sa.func.max(sa.case((named.included, named.recorded_at))).label("last_included_at"),
        )
        .where(*conditions)
        .group_by(named.lesson_id)
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
