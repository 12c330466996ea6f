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

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script.revision import RevisionError
from alembic.util.exc import CommandError
from sqlalchemy import exc

from contextstore.backends.sql.dialects import DIALECTS, dialect_of
from contextstore.backends.sql.dialects.postgresql import MIGRATION_LOCK_ID
from contextstore.backends.sql.dialects.sqlite_engine import (
    AUTOCOMMIT_OPTION,
    READ_ONLY_OPTION,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLITE_TEXT_FACTORY,
    check_sqlite_path,
    configure_sqlite,
    switch_to_wal,
)
from contextstore.backends.sql.errors import is_undecodable, translate_errors
from contextstore.backends.urls import mask_url
from contextstore.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ContextStoreError,
    MissingExtraError,
    ValidationError,
)

__all__ = [
    "AUTOCOMMIT_OPTION",
    "MIGRATIONS_DIR",
    "MIGRATION_LOCK_ID",
    "READ_ONLY_OPTION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_TEXT_FACTORY",
    "alembic_config",
    "autocommit",
    "create_database_engine",
    "current_revision",
    "downgrade",
    "head_revision",
    "migrate",
    "normalise_url",
    "read_only",
    "tolerating_bytes",
    "translate_errors",
]

T = TypeVar("T")
# The names other modules and tests import from here since before the dialect interface.
_configure_sqlite = configure_sqlite
_switch_to_wal = switch_to_wal
_check_sqlite_path = check_sqlite_path

# The one copy lives at the repository's top level (``migrations/``); the wheel ships it inside
# the package as ``contextstore/migrations`` so an installed contextstore can migrate itself.
_PACKAGE_DIR = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = next(
    (
        candidate
        for candidate in (_PACKAGE_DIR / "migrations", _PACKAGE_DIR.parent / "migrations")
        if (candidate / "env.py").is_file()
    ),
    _PACKAGE_DIR / "migrations",
)

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
    if parsed.get_backend_name() not in DIALECTS:
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
    dialect = dialect_of(parsed.get_backend_name())
    dialect.check_url(parsed)
    try:
        engine = sa.create_engine(parsed, json_serializer=_json_text)
    except ImportError as error:
        default_driver = parsed.get_driver_name() == dialect.default_driver
        if dialect.driver_extra is not None and default_driver:
            raise MissingExtraError(*dialect.driver_extra) from error
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    except exc.ArgumentError as error:
        raise ConfigurationError(f"database URL {_safe(parsed)!r} is unusable: {error}") from error
    dialect_of(engine).configure(engine)
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
    return dialect_of(engine).autocommit(engine)


def tolerating_bytes(engine: sa.Engine, read: Callable[[], T]) -> T:
    """``read()``; if the driver could not decode a stored text value, again with lenient
    decoding (``Dialect.decode_leniently``), which every connection of ``engine``'s pool
    keeps from then on."""
    try:
        return read()
    except ContextStoreError as error:
        dialect = dialect_of(engine)
        if not is_undecodable(dialect, error) or not dialect.decode_leniently(engine):
            raise
    return read()


def _safe(url: str | sa.URL) -> str:
    """The URL with every secret masked (``contextstore.backends.urls.mask_url``), for messages."""
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
                dialect_of(connection).lock_migrations(connection)
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
