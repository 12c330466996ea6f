"""SQLite: one writer at a time, WAL, naive UTC text timestamps, JSON through ``json_each``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from contextstore.backends.sql.dialects.base import Dialect, ErrorCodes
from contextstore.backends.sql.dialects.sqlite_engine import (
    AUTOCOMMIT_OPTION,
    check_sqlite_path,
    configure_sqlite,
    decode_leniently,
)

__all__ = ["SQLITE_ACTOR_TABLE", "SQLiteDialect"]

# Where a writer names its actor for the audit triggers, inside its own write transaction
# (migration 0003 explains why). Not a model: it is no part of the data.
SQLITE_ACTOR_TABLE: Final = "lesson_audit_actor"

# The candidate lookup (see ``lessons.queries``): a JSON array of keys unpacked by json_each,
# joined to the lessons in that order; SQLite never reorders a CROSS JOIN.
_CANDIDATES: Final = (
    "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary"
    "{extra} FROM lesson_scopes k CROSS JOIN lessons l "
    "WHERE k.scope_key IN (SELECT value FROM json_each(:keys)) "
    "AND l.entity_id = k.lesson_id AND l.status = 'active'"
)
_CANDIDATES_ANY_STATUS: Final = (
    "SELECT l.entity_id, l.severity, l.created_at, l.injection_form, k.scope_key, l.summary, "
    "l.status FROM lesson_scopes k CROSS JOIN lessons l "
    "WHERE k.scope_key IN (SELECT value FROM json_each(:keys)) "
    "AND l.entity_id = k.lesson_id"
)


class SQLiteDialect(Dialect):
    name = "sqlite"
    errors = ErrorCodes(
        locked=("database is locked", "database is busy"),
        undecodable=("Could not decode to UTF-8",),
    )
    async_driver = "sqlite+aiosqlite"
    default_driver = "pysqlite"
    driver_extra = None
    serves_driver_pool = False
    chunks_imports = True
    direct_autocommit = False
    is_file = True
    grants_roles = False

    def check_url(self, url: sa.URL) -> None:
        check_sqlite_path(url)

    def configure(self, engine: sa.Engine) -> None:
        configure_sqlite(engine)

    def decode_leniently(self, engine: sa.Engine) -> bool:
        return decode_leniently(engine)

    def autocommit(self, engine: sa.Engine) -> sa.Engine:
        # No BEGIN is emitted (the driver's own transaction handling is off, see
        # ``database._configure_sqlite``): each statement commits by itself.
        return engine.execution_options(**{AUTOCOMMIT_OPTION: True})

    def snapshot(self, connection: sa.Connection) -> sa.Connection:
        return connection  # a read transaction is one snapshot already

    def tune_report(self, connection: sa.Connection) -> None:
        return None

    def lock_migrations(self, connection: sa.Connection) -> None:
        return None  # BEGIN IMMEDIATE (the engine's default) took the write lock up front

    def locked_for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        return query  # BEGIN IMMEDIATE holds the one write lock already

    def checkpoint(self, engine: sa.Engine) -> None:
        # PASSIVE: never waits for readers or writers. Autocommit: a checkpoint runs outside
        # a BEGIN.
        connection = engine.raw_connection()
        try:
            connection.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            connection.close()

    def name_actor(self, session: Session, actor: str) -> None:
        # The one row of the actor table, removed again before the block ends; on a failure
        # the rollback of the transaction (or savepoint) removes it.
        session.execute(
            sa.text(f"INSERT OR REPLACE INTO {SQLITE_ACTOR_TABLE} (id, actor) VALUES (1, :actor)"),
            {"actor": actor},
        )

    def forget_actor(self, session: Session) -> None:
        session.execute(sa.text(f"DELETE FROM {SQLITE_ACTOR_TABLE}"))

    def by_code_point(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        return column  # SQLite's BINARY collation already compares code points

    def json_as_text(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(column, sa.String())

    def safe_timestamp(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(column, sa.String())  # the stored text, parsed by the reader

    def unindexed(self, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
        # ``+column``: SQLite's documented way to disqualify a term from an index.
        return sa.type_coerce(sa.literal_column(f"+{column.table.name}.{column.name}"), column.type)

    def json_array_holds(self, column: Any, value: str) -> sa.ColumnElement[bool]:
        # JSON text, unnested.
        each = sa.func.json_each(column).table_valued("value").alias("contains_each")
        return sa.exists(sa.select(sa.literal(1)).select_from(each).where(each.c.value == value))

    def typed_null(self, sql_type: str) -> str:
        return "NULL"  # a column's values keep their own types

    def bound_instant(self, value: datetime) -> datetime:
        # No time zone type: stored as naive UTC text, UTC attached again when read.
        return value.replace(tzinfo=None)

    def insert(self) -> Callable[[sa.Table], Any]:
        return sqlite.insert

    def candidate_sql(self, extra: str = "", *, any_status: bool = False) -> str:
        return _CANDIDATES_ANY_STATUS if any_status else _CANDIDATES.format(extra=extra)

    def keys_parameter(self, keys: Sequence[str]) -> list[str] | str:
        return json.dumps(list(keys))
