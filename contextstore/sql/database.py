"""Engines and migrations: the one place that knows how to open and upgrade a database.

SQLite runs in WAL mode with a 30 s busy timeout and foreign keys on. The driver's own
transaction handling is switched off and SQLAlchemy emits ``BEGIN IMMEDIATE`` itself, so a
writer takes SQLite's write lock when its transaction *starts* and a concurrent writer waits
(up to the busy timeout) instead of failing half-way with "database is locked". Connections
marked ``read_only`` (see ``read_only()``) start with a plain deferred ``BEGIN`` instead, so
readers never queue behind writers. The same recipe makes DDL transactional and SAVEPOINT
work on SQLite.

PostgreSQL is reached through psycopg 3; ``postgresql://`` and ``postgres://`` URLs are
normalised to ``postgresql+psycopg://``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script.revision import RevisionError
from alembic.util.exc import CommandError
from sqlalchemy import event, exc

from contextstore.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ContextStoreError,
    MissingExtraError,
    ValidationError,
)
from contextstore.urls import mask_url

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
# The one copy lives at the repository's top level (``migrations/``); the wheel ships it inside
# the package as ``contextstore/migrations`` so an installed contextstore can migrate itself.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
MIGRATIONS_DIR = next(
    (
        candidate
        for candidate in (_PACKAGE_DIR / "migrations", _PACKAGE_DIR.parent / "migrations")
        if (candidate / "env.py").is_file()
    ),
    _PACKAGE_DIR / "migrations",
)
# Any fixed 64-bit number; all contextstore processes agree on it (PostgreSQL advisory lock).
MIGRATION_LOCK_ID = 0x636F6E7465787473  # "contexts"
READ_ONLY_OPTION = "contextstore_read_only"
AUTOCOMMIT_OPTION = "contextstore_autocommit"

_POSTGRES_ALIASES = ("postgresql", "postgres")
# Several threads of one process migrating the same SQLite file: serialise them here too
# (SQLite's lock would, but a lock in memory is cheaper than a busy wait).
_process_migration_lock = threading.Lock()


def normalise_url(url: str | sa.URL) -> sa.URL:
    """Parse ``url``; route plain PostgreSQL URLs to psycopg 3.

    Raises ``ConfigurationError`` (naming the URL, password hidden) for anything that is not
    a SQLite or PostgreSQL URL.
    """
    try:
        parsed = sa.make_url(url)
    except exc.ArgumentError as error:
        raise ConfigurationError(f"database URL {_safe(url)!r} cannot be parsed") from error
    except ValueError as error:  # a port that is not a number
        raise ConfigurationError(f"database URL {_safe(url)!r}: bad port ({error})") from error
    if parsed.drivername in _POSTGRES_ALIASES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigurationError(
            f"database URL {_safe(parsed)!r}: only sqlite:// and postgresql:// are supported"
        )
    return parsed


def create_database_engine(url: str | sa.URL) -> sa.Engine:
    """An ``Engine`` for a SQLite or PostgreSQL URL, configured for many processes.

    Edge cases: a SQLite file whose directory does not exist, an unknown scheme, or a missing
    driver raise ``ConfigurationError`` naming the URL (password hidden); a missing psycopg
    is a ``MissingExtraError`` naming the extra that installs it. Nothing connects here; an
    unreachable server is reported on first use.
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_path(parsed)
    try:
        engine = sa.create_engine(parsed, json_serializer=_json_text)
    except ImportError as error:
        if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg":
            raise MissingExtraError("PostgreSQL", "the psycopg driver", "postgres") from error
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    except exc.ArgumentError as error:
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


def _json_text(value: object) -> str:
    # Non-ASCII stays as it is: SQLite's JSON path lookups (json_extract(doc, '$."ключ"'))
    # compare keys as stored and would not find one written as \u escapes.
    return json.dumps(value, ensure_ascii=False)


def read_only(engine: sa.Engine) -> sa.Engine:
    """The same engine (same pool) whose transactions only read: deferred ``BEGIN`` on SQLite."""
    return engine.execution_options(**{READ_ONLY_OPTION: True})


def autocommit(engine: sa.Engine) -> sa.Engine:
    """The same engine (same pool) in autocommit: each statement is its own transaction.

    For the engine's hot path, which reads with one statement and writes with one: no
    BEGIN, COMMIT or ROLLBACK round trips around them. PostgreSQL: the driver's autocommit
    (switching it is local to the client, no round trip). SQLite: no BEGIN is emitted (the
    driver's own transaction handling is off, see ``_configure_sqlite``), so each statement
    commits by itself, durably, before ``execute`` returns.
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine.execution_options(**{AUTOCOMMIT_OPTION: True})


# Text SQLite hands back that is not UTF-8 (bytes typed by hand, ``CAST(x'80ff' AS TEXT)``)
# fails the whole statement in the driver, every other row with it. A database found holding
# such bytes (``tolerating_bytes``) has its connections decode with surrogateescape from then
# on: the bytes become lone surrogates the readers recognise and step around
# (``contextstore.sql.unreadable.check_text``). Only then: the driver's default decoder is
# C code throughout, and a Python-level factory would slow every read of a clean database.
SQLITE_TEXT_FACTORY: Final = functools.partial(str, encoding="utf-8", errors="surrogateescape")
_LENIENT_OPTION: Final = "contextstore_lenient_text"
_UNDECODABLE: Final = "Could not decode to UTF-8"


def tolerating_bytes(engine: sa.Engine, read: Callable[[], T]) -> T:
    """``read()``; if SQLite could not decode a text value, again with lenient decoding.

    From then on every connection of ``engine``'s pool decodes leniently (see above).
    """
    try:
        return read()
    except ContextStoreError as error:
        if engine.dialect.name != "sqlite" or not _undecodable(error):
            raise
        if getattr(engine.dialect, _LENIENT_OPTION, False):
            raise
    setattr(engine.dialect, _LENIENT_OPTION, True)
    return read()


def _undecodable(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if _UNDECODABLE in str(seen):
            return True
        seen = seen.__cause__
    return False


def _configure_sqlite(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        # Hand transaction control to SQLAlchemy (the begin hook below) instead of pysqlite,
        # which would otherwise BEGIN lazily and commit around DDL on its own.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # busy_timeout first: switching to WAL itself needs a lock another process may hold.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

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


def _switch_to_wal(cursor: Any) -> None:
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


def _check_sqlite_path(url: sa.URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    parent = Path(database).expanduser().resolve().parent
    if not parent.is_dir():
        raise ConfigurationError(
            f"database URL {_safe(url)!r}: directory {str(parent)!r} does not exist"
        )


def _safe(url: str | sa.URL) -> str:
    """The URL with every secret masked (``contextstore.urls.mask_url``), for messages."""
    return mask_url(url)


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Alembic's configuration built in code: works whatever the current directory is."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@contextmanager
def _engine_for(target: str | sa.URL | sa.Engine) -> Iterator[sa.Engine]:
    if isinstance(target, sa.Engine):
        yield target
        return
    engine = create_database_engine(target)
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def _migration_connection(target: str | sa.URL | sa.Engine) -> Iterator[sa.Connection]:
    """One transaction holding the migration lock: concurrent migrators run one at a time.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: ``BEGIN IMMEDIATE`` (the engine's
    default) takes the write lock up front; others wait out the busy timeout. Either way the
    second process then sees the first one's finished schema and has nothing left to do.
    """
    with _engine_for(target) as engine, _process_migration_lock:
        try:
            with engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID}
                    )
                yield connection
        except exc.DatabaseError as error:  # unreachable, or a file that is not a database
            raise BackendUnavailableError(
                f"database {_safe(engine.url)!r} is unavailable: {error.orig}"
            ) from error


def migrate(target: str | sa.URL | sa.Engine, revision: str = "head") -> None:
    """Upgrade the database at ``target`` (a URL or an Engine) to ``revision``.

    Idempotent, and safe when several processes call it at once on a fresh database.
    """
    with _migration_connection(target) as connection, _revision_errors(revision):
        command.upgrade(alembic_config(connection), revision)


def downgrade(target: str | sa.URL | sa.Engine, revision: str) -> None:
    """Downgrade to ``revision`` (``"base"`` removes every contextstore table and trigger)."""
    with _migration_connection(target) as connection, _revision_errors(revision):
        command.downgrade(alembic_config(connection), revision)


@contextmanager
def _revision_errors(revision: str) -> Iterator[None]:
    """Alembic's complaints about a revision (unknown, wrong direction) → ValidationError."""
    try:
        yield
    except (CommandError, RevisionError) as error:
        raise ValidationError("revision", f"{revision!r}: {error}") from error


def current_revision(target: str | sa.URL | sa.Engine) -> str | None:
    """The revision the database is at, or ``None`` when it was never migrated."""
    with _engine_for(target) as engine:
        try:
            # Connecting is inside the try: an unreachable server fails right there.
            with read_only(engine).connect() as connection:
                return MigrationContext.configure(connection).get_current_revision()
        except exc.DatabaseError as error:  # unreachable, or a file that is not a database
            raise BackendUnavailableError(
                f"database {_safe(engine.url)!r} is unavailable: {error.orig}"
            ) from error


def head_revision() -> str:
    """The newest revision the installed package ships."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the package ships at least one migration"
    return head


# Constraint and trigger names as they appear in driver messages → the record field at fault.
_FIELD_BY_CONSTRAINT = (
    ("ck_lessons_status", "status"),
    ("ck_lessons_severity", "severity"),
    ("ck_lessons_entity_id", "entity_id"),
    ("ck_lessons_superseded_by", "superseded_by"),
    ("fk_lessons_superseded_by", "superseded_by"),
    ("ck_lessons_injection_form_size", "injection_form"),
    ("ck_lesson_scopes_scope_key", "applies_to"),
    ("pk_lesson_scopes", "applies_to"),
    ("lesson_scopes.", "applies_to"),
    ("created_at is immutable", "created_at"),
    ("lesson lifecycle", "status"),
    ("lessons.created_at", "created_at"),
    ("lessons.updated_at", "updated_at"),
    ("lessons.evidence", "evidence"),
    ("append-only", "lesson_events"),
    ("immutable", "entity_id"),
    ("pk_lessons", "entity_id"),
    ("lessons.entity_id", "entity_id"),
)


@contextmanager
def translate_errors(url: sa.URL | None = None) -> Iterator[None]:
    """Turn driver errors into contextstore errors at the storage boundary.

    An integrity error (a check constraint, a key, a trigger) becomes ``ValidationError``
    naming the field the constraint guards (``"record"`` when it cannot tell); a lost or
    refused connection becomes ``BackendUnavailableError``.
    """
    try:
        yield
    except exc.IntegrityError as error:
        message = str(error.orig)
        field = next((f for name, f in _FIELD_BY_CONSTRAINT if name in message), "record")
        raise ValidationError(field, f"refused by the database: {message.strip()}") from error
    except (exc.DatabaseError, exc.InterfaceError) as error:
        where = f"database {_safe(url)!r}" if url is not None else "the database"
        raise BackendUnavailableError(f"{where} is unavailable: {error.orig}") from error
