"""PostgreSQL through psycopg 3: MVCC snapshots, SQLSTATEs, arrays, transaction settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from contextstore.backends.sql.dialects.base import Dialect, ErrorCodes

__all__ = ["MIGRATION_LOCK_ID", "REPORT_WORK_MEM", "PostgreSQLDialect"]

# Any fixed 64-bit number; all contextstore processes agree on it (PostgreSQL advisory lock).
MIGRATION_LOCK_ID: Final = 0x636F6E7465787473  # "contexts"
# Memory one report's sort may use, for its transaction only. The default (4 MB) sorts a
# million response times on disk, about twice as slow as in memory; a report over a million
# rows needs about 50 MB.
REPORT_WORK_MEM: Final = "64MB"
# Instants Python can hold in any time zone: a day of margin at both ends.
EARLIEST: Final = "0001-01-02 00:00:00+00"
LATEST: Final = "9999-12-30 00:00:00+00"

# The candidate lookup (see ``lessons.queries``): the keys as one text[] parameter; the lesson
# fetched in a LATERAL subquery that refers to the key row, OFFSET 0 keeping the planner from
# pulling it up into a free join (the PostgreSQL developers' own idiom), so it runs once per
# matching key row, for a generic plan too (psycopg prepares after 5 runs on a connection).
_CANDIDATES: Final = (
    "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary"
    "{extra} FROM lesson_scopes k CROSS JOIN LATERAL ("
    "SELECT entity_id, severity, injection_form, summary, CASE WHEN isfinite(created_at) "
    f"AND created_at >= '{EARLIEST}' AND created_at < '{LATEST}' "
    "THEN created_at END AS created_at FROM lessons "
    "WHERE entity_id = k.lesson_id AND status = 'active' OFFSET 0) l "
    "WHERE k.scope_key = ANY(CAST(:keys AS text[]))"
)
_CANDIDATES_ANY_STATUS: Final = (
    "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary, "
    "l.status FROM lesson_scopes k CROSS JOIN LATERAL ("
    "SELECT entity_id, severity, injection_form, summary, status, CASE WHEN "
    f"isfinite(created_at) AND created_at >= '{EARLIEST}' "
    f"AND created_at < '{LATEST}' THEN created_at END AS created_at "
    "FROM lessons WHERE entity_id = k.lesson_id OFFSET 0) l "
    "WHERE k.scope_key = ANY(CAST(:keys AS text[]))"
)


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    # Unique violation, serialization failure, deadlock: retrying sees the other
    # transaction's committed rows.
    errors = ErrorCodes(conflicts=frozenset({"23505", "40001", "40P01"}))
    async_driver = None  # psycopg 3 serves both
    default_driver = "psycopg"
    driver_extra = ("PostgreSQL", "the psycopg driver", "postgres")
    serves_driver_pool = True
    chunks_imports = False
    direct_autocommit = True
    is_file = False
    grants_roles = True

    def check_url(self, url: sa.URL) -> None:
        return None

    def configure(self, engine: sa.Engine) -> None:
        return None

    def decode_leniently(self, engine: sa.Engine) -> bool:
        return False  # PostgreSQL refuses text that is not UTF-8 on the way in

    def autocommit(self, engine: sa.Engine) -> sa.Engine:
        # The driver's autocommit: switching it is local to the client, no round trip.
        return engine.execution_options(isolation_level="AUTOCOMMIT")

    def snapshot(self, connection: sa.Connection) -> sa.Connection:
        # The default READ COMMITTED would let rows committed between two statements make
        # their figures disagree.
        return connection.execution_options(isolation_level="REPEATABLE READ")

    def tune_report(self, connection: sa.Connection) -> None:
        connection.exec_driver_sql(f"SET LOCAL work_mem = '{REPORT_WORK_MEM}'")

    def lock_migrations(self, connection: sa.Connection) -> None:
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})

    def locked_for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        return query.with_for_update()

    def checkpoint(self, engine: sa.Engine) -> None:
        return None

    def name_actor(self, session: Session, actor: str) -> None:
        # Transaction-local, so it ends with the transaction at the latest.
        session.execute(
            sa.text("SELECT set_config('contextstore.actor', :actor, true)"), {"actor": actor}
        )

    def forget_actor(self, session: Session) -> None:
        session.execute(sa.text("SELECT set_config('contextstore.actor', '', true)"))

    def by_code_point(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        return column.collate("C")

    def json_as_text(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.cast(column, sa.Text())

    def safe_timestamp(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        # NULL for a value Python's datetime cannot hold (infinity, before year 1, after 9998).
        readable = sa.and_(
            sa.func.isfinite(column),
            column >= sa.cast(sa.literal(EARLIEST), column.type),
            column < sa.cast(sa.literal(LATEST), column.type),
        )
        return sa.case((readable, column), else_=sa.null())

    def unindexed(self, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
        return column  # the planner weighs its indexes by statistics, not by the term

    def json_array_holds(self, column: Any, value: str) -> sa.ColumnElement[bool]:
        # jsonb containment, not an unnest: the same answer, and an index on the column
        # could serve it.
        held: sa.ColumnElement[bool] = column.op("@>", return_type=sa.Boolean())(
            sa.func.jsonb_build_array(sa.cast(value, sa.Text()))
        )
        return held

    def typed_null(self, sql_type: str) -> str:
        return f"CAST(NULL AS {sql_type})"

    def bound_instant(self, value: datetime) -> datetime:
        return value  # timestamp with time zone

    def insert(self) -> Callable[[sa.Table], Any]:
        return postgresql.insert

    def candidate_sql(self, extra: str = "", *, any_status: bool = False) -> str:
        return _CANDIDATES_ANY_STATUS if any_status else _CANDIDATES.format(extra=extra)

    def keys_parameter(self, keys: Sequence[str]) -> list[str] | str:
        return list(keys)
