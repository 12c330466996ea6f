"""Scratch resources (PostgreSQL databases, SQLite files, Redis namespaces) and round-trip
counters. Everything created here is removed by ``Services.close()``; shared servers are
never flushed."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from contextstore.backends.redis.client import RedisClient, client_from_url
from contextstore.backends.redis.keys import namespace_pattern
from contextstore.backends.sql.database import create_database_engine, migrate

RUN_ID = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"

# Where the benchmarks work unless told otherwise (--redis-url / --postgres-url, or these
# environment variables). Redis: database 15, the last of a default server's 16, so a run
# never writes into database 0 where applications usually live; its keys sit in namespaces
# of its own and are deleted at the end. PostgreSQL: an admin URL from which a scratch
# database per section is created and then dropped; the admin database itself is only
# connected to, never written.
ENV_REDIS_URL = "CONTEXTSTORE_BENCH_REDIS_URL"
ENV_POSTGRES_URL = "CONTEXTSTORE_BENCH_POSTGRES_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def default_redis_url() -> str:
    return os.environ.get(ENV_REDIS_URL) or DEFAULT_REDIS_URL


def default_postgres_url() -> str:
    return os.environ.get(ENV_POSTGRES_URL) or DEFAULT_POSTGRES_URL


class Unavailable(Exception):
    """A service the section needs cannot be reached; the message is one line."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@dataclass
class Services:
    postgres_admin_url: str
    redis_url: str
    _scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cs_bench_")))
    _pg_databases: list[str] = field(default_factory=list)
    _engines: list[sa.Engine] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _clients: list[Any] = field(default_factory=list)
    _postgres_error: str | None = None
    _redis_error: str | None = None
    _checked: set[str] = field(default_factory=set)

    # -- availability ---------------------------------------------------------------------

    def require_postgres(self) -> None:
        if "postgres" not in self._checked:
            self._checked.add("postgres")
            try:
                engine = sa.create_engine(
                    self.postgres_admin_url, connect_args={"connect_timeout": 3}
                )
                with engine.connect() as connection:
                    connection.execute(sa.text("SELECT 1"))
                engine.dispose()
            except Exception as exc:  # any driver or URL error: the section is skipped
                self._postgres_error = (
                    f"PostgreSQL at {_safe(self.postgres_admin_url)} unreachable ({_one_line(exc)})"
                )
        if self._postgres_error:
            raise Unavailable(self._postgres_error)

    def require_redis(self) -> None:
        if "redis" not in self._checked:
            self._checked.add("redis")
            try:
                client = client_from_url(self.redis_url)
                client.ping()
                client.close()
            except Exception as exc:
                self._redis_error = f"Redis at {self.redis_url} unreachable ({_one_line(exc)})"
        if self._redis_error:
            raise Unavailable(self._redis_error)

    # -- SQL ------------------------------------------------------------------------------

    def scratch_file(self, name: str) -> Path:
        """A path in the run's scratch directory (removed at the end)."""
        return self._scratch / name

    def database_url(self, dialect: str, name: str) -> str:
        """A fresh, migrated database of ``dialect`` (``sqlite``/``postgresql``) as a URL."""
        if dialect == "sqlite":
            url = f"sqlite:///{self._scratch / (name + '.db')}"
        else:
            self.require_postgres()
            database = f"cs_bench_{RUN_ID}_{name}"
            admin = sa.create_engine(self.postgres_admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as connection:
                connection.execute(sa.text(f'CREATE DATABASE "{database}"'))
            admin.dispose()
            self._pg_databases.append(database)
            url = (
                sa.make_url(self.postgres_admin_url)
                .set(database=database)
                .render_as_string(hide_password=False)
            )
        migrate(url)
        return url

    def engine(self, url: str) -> sa.Engine:
        engine = create_database_engine(url)
        self._engines.append(engine)
        return engine

    # -- Redis ----------------------------------------------------------------------------

    def namespace(self, part: str) -> str:
        """A namespace of our own; its keys are deleted by ``close()``."""
        namespace = f"csbench-{RUN_ID}-{part}"
        self._namespaces.append(namespace)
        return namespace

    def redis_client(self) -> RedisClient:
        self.require_redis()
        client = client_from_url(self.redis_url)
        self._clients.append(client)
        return client

    # -- cleanup --------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Drop every scratch database and namespace; returns one line per failure."""
        problems: list[str] = []
        for engine in self._engines:
            engine.dispose()
        # Namespaces may have been used through a URL without require_redis(): try anyway,
        # unless Redis is already known to be unreachable.
        if self._namespaces and not self._redis_error:
            try:
                client = client_from_url(self.redis_url)
                for namespace in self._namespaces:
                    batch = list(client.scan_iter(match=namespace_pattern(namespace), count=1000))
                    for start in range(0, len(batch), 500):
                        client.delete(*batch[start : start + 500])
                client.close()
            except Exception as exc:
                problems.append(f"could not delete the benchmark's Redis keys: {_one_line(exc)}")
        for client in self._clients:
            client.close()
        if self._pg_databases:
            try:
                admin = sa.create_engine(self.postgres_admin_url, isolation_level="AUTOCOMMIT")
                with admin.connect() as connection:
                    for database in self._pg_databases:
                        connection.execute(
                            sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                        )
                admin.dispose()
            except Exception as exc:
                problems.append(f"could not drop scratch databases: {_one_line(exc)}")
        shutil.rmtree(self._scratch, ignore_errors=True)
        return problems


def _safe(url: str) -> str:
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


# -- round trips ----------------------------------------------------------------------------


@dataclass
class SqlCounter:
    """Statements a SQLite engine's connections run (BEGIN and COMMIT included), counted by
    the driver itself (``sqlite3``'s trace callback): statements sent through
    ``Connection.execute`` and those sent on the driver connection
    (``contextstore.backends.sql.direct``) alike. ``commits``: the COMMITs and ROLLBACKs among them.

    The statements of a trigger (``query_metric_lessons``'s, on every metrics row) are traced
    too, each with the text of the statement that fired it (or, by some drivers, as an SQL
    comment naming the trigger): a text traced again right after itself counts once (a run
    never sends the same statement twice in a row), and comments not at all."""

    statements: int = 0
    commits: int = 0
    _last: str | None = None

    def attach(self, engine: sa.Engine) -> SqlCounter:
        def on_statement(sql: str) -> None:
            if sql == self._last or sql.startswith("--"):
                return
            self._last = sql
            self.statements += 1
            if sql.lstrip().upper().startswith(("COMMIT", "ROLLBACK")):
                self.commits += 1

        def on_checkout(dbapi_connection: Any, *_args: Any) -> None:
            dbapi_connection.set_trace_callback(on_statement)

        engine.pool.dispose()  # every later connection is checked out through the hook
        event.listen(engine, "checkout", on_checkout)
        return self

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.commits


@dataclass
class RedisCounter:
    """Round trips of one redis-py client: one per packed send (a pipeline counts once)."""

    sends: int = 0

    def attach(self, client: Any) -> RedisCounter:
        """Swap the pool's connection class for a counting subclass; drop idle connections,
        so every later connection counts. Call before the client is busy."""
        pool = client.connection_pool
        base: type[Any] = pool.connection_class
        counter = self

        class CountingConnection(base):  # type: ignore[misc]
            def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.sends += 1
                super().send_packed_command(command, check_health)

        pool.connection_class = CountingConnection
        pool.disconnect()
        return self


def counting(callback: Callable[[], object], counter: RedisCounter) -> int:
    """How many Redis round trips one call of ``callback`` makes."""
    before = counter.sends
    callback()
    return counter.sends - before
