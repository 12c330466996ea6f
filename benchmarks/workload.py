"""Synthetic lessons at scale, their bulk load, and the hand-written SQL baselines.

Lessons come in blocks of ``BLOCK`` (2,000). Inside block ``b`` lesson ``j`` gets two keys:
``tag:skill-<b>-<(37 j) mod 20>`` (20 tags × 100 lessons) and either the org key
``id:org<b>`` (every tenth lesson: 200 per org) or its team key
``id:org<b>.team<(j div 10) mod 10>`` (10 teams × 180). One lesson in ten is proposed or
retired, the rest active. A scope ``org<b>.team<t>.svc1.agent2`` + one tag of block ``b``
therefore matches about 400 active lessons however many blocks exist: the table grows, the
answer does not, which is what "growth from 20k to 200k" should isolate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa

from contextstore.backends.sql.database import read_only
from contextstore.backends.sql.models import LessonRow, LessonScopeRow
from contextstore.core.matching import Lesson, MatchOptions, MatchResult, Scope, lookup_keys, match

BLOCK = 2_000
BATCH = 10_000  # rows per executemany; one transaction each
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)

LESSONS = cast(sa.Table, LessonRow.__table__)
SCOPES = cast(sa.Table, LessonScopeRow.__table__)


def _lesson(n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    block, j = divmod(n, BLOCK)
    entity_id = f"bench.b{block}.l{j}"
    status = ("proposed", "retired")[j % 20] if j % 20 < 2 else "active"
    team = (j // 10) % 10
    scope = f"id:org{block}" if j % 10 == 0 else f"id:org{block}.team{team}"
    created = EPOCH + timedelta(minutes=j, microseconds=block)
    row = {
        "entity_id": entity_id,
        "status": status,
        "severity": ("critical", "warning", "info")[j % 3],
        "created_at": created,
        "updated_at": created,
        "injection_form": f"Lesson {block}-{j}: read the runbook of team {team} before any change.",
    }
    keys = [
        {"lesson_id": entity_id, "scope_key": f"tag:skill-{block}-{(37 * j) % 20}", "position": 0},
        {"lesson_id": entity_id, "scope_key": scope, "position": 1},
    ]
    return row, keys


def bulk_load(
    engine: sa.Engine, start: int, stop: int, on_batch: Callable[[int], None] | None = None
) -> None:
    """Insert lessons ``start`` ≤ n < ``stop`` straight into ``lessons`` and ``lesson_scopes``.

    The repository's import validates and inserts one lesson per statement (right for a few
    hundred, far too slow for 200k); plain executemany batches into the real tables keep the
    schema's checks and audit triggers in force and load 200k in seconds.
    """
    for first in range(start, stop, BATCH):
        rows: list[dict[str, Any]] = []
        keys: list[dict[str, Any]] = []
        for n in range(first, min(first + BATCH, stop)):
            row, lesson_keys = _lesson(n)
            rows.append(row)
            keys.extend(lesson_keys)
        with engine.begin() as connection:
            connection.execute(sa.insert(LESSONS), rows)
            connection.execute(sa.insert(SCOPES), keys)
        if on_batch is not None:
            on_batch(min(first + BATCH, stop))
    # Leave each database as it would be in production. PostgreSQL: the state autovacuum
    # reaches on its own soon after a load (statistics, a vacuumed heap), made now so no
    # background vacuum competes with the timed runs. SQLite: no statistics at all — nothing
    # in contextstore (or SQLite) runs ANALYZE, so its planner works from heuristics.
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("VACUUM ANALYZE")


def scopes(lesson_count: int, count: int) -> list[Scope]:
    """``count`` scopes spread over the loaded blocks, each matching ~400 active lessons."""
    blocks = max(1, lesson_count // BLOCK)
    return [
        Scope(
            entity_ids=(f"org{(i * 7919) % blocks}.team{i % 10}.svc1.agent2",),
            tags=(f"skill-{(i * 7919) % blocks}-{(i * 3) % 20}",),
        )
        for i in range(count)
    ]


# -- baselines ------------------------------------------------------------------------------

_COLUMNS = "l.entity_id, l.severity, l.created_at, l.injection_form, s.scope_key"
FULL_SCAN_SQL = (
    f"SELECT {_COLUMNS} FROM lessons l JOIN lesson_scopes s ON s.lesson_id = l.entity_id "
    "WHERE l.status = 'active'"
)


def indexed_sql(key_count: int, dialect: str) -> str:
    """The one hand-written statement: matching keys joined to active lessons.

    On SQLite it is written ``CROSS JOIN``, which SQLite never reorders: the lookup starts
    from the scope-key index whatever the statistics say. Written as a plain ``JOIN``, SQLite
    without statistics walks every active lesson through ``ix_lessons_status`` instead
    (hundreds of milliseconds at 200k), which would make a meaningless baseline.
    """
    if dialect == "postgresql":
        marks = ", ".join(["%s"] * key_count)
        join = "lesson_scopes s JOIN lessons l ON l.entity_id = s.lesson_id WHERE"
    else:
        marks = ", ".join(["?"] * key_count)
        join = "lesson_scopes s CROSS JOIN lessons l WHERE l.entity_id = s.lesson_id AND"
    return f"SELECT {_COLUMNS} FROM {join} s.scope_key IN ({marks}) AND l.status = 'active'"


def _rfc3339(value: Any) -> str:
    # SQLite hands back the stored naive-UTC text, PostgreSQL an aware datetime.
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    text = str(value)
    return f"{text[:10]}T{text[11:]}+00:00"


def _lessons_from_rows(rows: Iterator[Sequence[Any]] | Sequence[Sequence[Any]]) -> list[Lesson]:
    grouped: dict[str, tuple[Any, ...]] = {}
    keys: dict[str, list[str]] = {}
    for entity_id, severity, created_at, form, scope_key in rows:
        if entity_id not in grouped:
            grouped[entity_id] = (severity, created_at, form)
            keys[entity_id] = []
        keys[entity_id].append(scope_key)
    return [
        Lesson(
            entity_id=entity_id,
            status="active",
            severity=severity,
            created_at=_rfc3339(created_at),
            applies_to=tuple(keys[entity_id]),
            injection_form=form,
        )
        for entity_id, (severity, created_at, form) in grouped.items()
    ]


def hand_written(engine: sa.Engine) -> Callable[[Scope], MatchResult]:
    """Baseline 1: one indexed statement through the same pool, grouped and matched."""
    reader = read_only(engine)
    dialect = engine.dialect.name

    def run(scope: Scope) -> MatchResult:
        keys = sorted(lookup_keys(scope))
        with reader.connect() as connection:
            rows = connection.exec_driver_sql(indexed_sql(len(keys), dialect), tuple(keys)).all()
        return match(_lessons_from_rows(rows), scope, MatchOptions())

    return run


def full_scan(engine: sa.Engine) -> Callable[[Scope], MatchResult]:
    """Baseline 2: every active lesson loaded, then filtered by the matcher in Python."""
    reader = read_only(engine)

    def run(scope: Scope) -> MatchResult:
        with reader.connect() as connection:
            rows = connection.exec_driver_sql(FULL_SCAN_SQL).all()
        return match(_lessons_from_rows(rows), scope, MatchOptions())

    return run
