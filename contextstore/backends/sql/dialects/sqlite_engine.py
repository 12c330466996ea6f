"""How a SQLite engine is set up: WAL, a busy timeout, foreign keys, and SQLAlchemy (not the
driver) emitting ``BEGIN IMMEDIATE``, so a writer takes the write lock when its transaction
starts and a concurrent writer waits instead of failing half-way. A connection marked
``READ_ONLY_OPTION`` begins with a plain deferred ``BEGIN``; one marked
``AUTOCOMMIT_OPTION`` begins nothing.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import event

from contextstore.backends.sql.dialects.sqlite_vec import load_sqlite_vec
from contextstore.backends.urls import mask_url
from contextstore.errors import ConfigurationError

__all__ = [
    "AUTOCOMMIT_OPTION",
    "READ_ONLY_OPTION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_TEXT_FACTORY",
    "check_sqlite_path",
    "configure_sqlite",
    "decode_leniently",
    "switch_to_wal",
]

SQLITE_BUSY_TIMEOUT_MS: Final = 30_000
READ_ONLY_OPTION: Final = "contextstore_read_only"
AUTOCOMMIT_OPTION: Final = "contextstore_autocommit"

# Text SQLite hands back that is not UTF-8 (bytes typed by hand, ``CAST(x'80ff' AS TEXT)``)
# fails the whole statement in the driver, every other row with it. A database found holding
# such bytes (``tolerating_bytes``) has its connections decode with surrogateescape from then
# on: the bytes become lone surrogates the readers recognise and step around
# (``contextstore.backends.sql.unreadable.check_text``). Only then: the driver's default decoder is
# C code throughout, and a Python-level factory would slow every read of a clean database.
SQLITE_TEXT_FACTORY: Final = functools.partial(str, encoding="utf-8", errors="surrogateescape")
_LENIENT_OPTION: Final = "contextstore_lenient_text"


def decode_leniently(engine: sa.Engine) -> bool:
    """Make every connection of ``engine``'s pool decode text with surrogateescape from now
    on; ``False`` when it did already."""
    if getattr(engine.dialect, _LENIENT_OPTION, False):
        return False
    setattr(engine.dialect, _LENIENT_OPTION, True)
    return True


def configure_sqlite(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        # Hand transaction control to SQLAlchemy (the begin hook below) instead of pysqlite,
        # which would otherwise BEGIN lazily and commit around DDL on its own.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # busy_timeout first: switching to WAL itself needs a lock another process may hold.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        switch_to_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()
        load_sqlite_vec(dbapi_connection)

    @event.listens_for(engine, "checkout")
    def _on_checkout(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if getattr(engine.dialect, _LENIENT_OPTION, False):
            # The driver's own connection: sqlite3's, or aiosqlite's (which forwards it).
            record.driver_connection.text_factory = SQLITE_TEXT_FACTORY

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        options = connection.get_execution_options()
        if options.get(AUTOCOMMIT_OPTION, False):
            return
        read = options.get(READ_ONLY_OPTION, False)
        connection.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")


def switch_to_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the lock.

    Two connections switching a fresh (rollback-journal) file at once both hold a SHARED lock
    and both want EXCLUSIVE; SQLite then fails one of them at once with "database is locked",
    without calling the busy handler, since waiting could deadlock. The loser retries here
    until the other has finished, within the same busy timeout as any other wait.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            busy = "locked" in str(error) or "busy" in str(error)
            if not busy or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def check_sqlite_path(url: sa.URL) -> None:
    """Refuse a SQLite file whose directory does not exist (``ConfigurationError``)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    parent = Path(database).expanduser().resolve().parent
    if not parent.is_dir():
        raise ConfigurationError(
            f"database URL {mask_url(url)!r}: directory {str(parent)!r} does not exist"
        )
