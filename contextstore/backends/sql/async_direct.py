"""A run's statements on the event loop, sent on psycopg's own async connections.

``DriverPool`` keeps ``AsyncConnection``s of its own, in autocommit, opened with the
arguments SQLAlchemy's dialect derives from the URL, and awaits a ``DirectStatement``'s
compiled SQL and converted parameters on them, skipping the greenlet bridge (why, and what
it saves: ``docs/decisions/0035-async-postgresql-statements-on-psycopg-directly.md``).
PostgreSQL only: SQLite's async statements stay on the bridge.

- A driver error comes out as the ``sqlalchemy.exc.DBAPIError`` subclass
  ``Connection.execute`` would raise, so callers translate it exactly as for the sync path.
- A connection found dropped fails its call, and every connection opened before it, in this
  pool and in the engine's, is replaced at its next use (``disconnects``); a disconnect the
  engine's own statements see does the same here.
- A statement interrupted by a cancellation leaves its connection in an unknown state: it is
  closed, not reused.
- Statements go out with PostgreSQL's ``$n`` placeholders on psycopg's raw cursor, rewritten
  once per statement from the compiled ``%(name)s`` form.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.disconnects import disconnects
from contextstore.errors import ConfigurationError

__all__ = ["MAX_NATIVE_STATEMENTS", "DriverPool"]

# Rewritten statements a pool keeps (a run's few fixed statements; a bound all the same).
MAX_NATIVE_STATEMENTS = 64


class DriverPool:
    """At most ``size`` psycopg ``AsyncConnection``s to ``engine``'s PostgreSQL database,
    for ``DirectStatement``s; a caller beyond ``size`` waits for a free connection.

    Connections open on first need and stay open until ``aclose()``.
    """

    def __init__(self, engine: AsyncEngine, size: int) -> None:
        import psycopg

        sync = engine.sync_engine
        dialect = dialect_of(sync)
        if not dialect.serves_driver_pool:
            raise ConfigurationError(f"DriverPool serves PostgreSQL, not {dialect.name}")
        self._connect = psycopg.AsyncConnection.connect
        self._cursor = psycopg.AsyncRawCursor
        self._error: type[Exception] = psycopg.Error
        self._dialect = sync.dialect
        self._hide_parameters = sync.hide_parameters
        args, options = sync.dialect.create_connect_args(sync.url)
        self._args = tuple(args)
        self._options = {**options, "autocommit": True}
        self._disconnects = disconnects(sync)
        self._idle: list[tuple[Any, int]] = []  # (connection, the epoch it was opened in)
        self._slots = asyncio.Semaphore(size)
        self._native: dict[str, tuple[str, tuple[str, ...]]] = {}  # see ``_positional``

    async def rows(self, statement: DirectStatement, values: Any) -> list[Any]:
        """Run ``statement`` with ``values`` (its parameters by name); its rows (tuples)."""
        return await self._run(*self._positional(statement, values), fetch=True)

    async def execute(self, statement: DirectStatement, values: Any) -> None:
        """Run ``statement`` with ``values``; committed when this returns."""
        await self._run(*self._positional(statement, values), fetch=False)

    def _positional(self, statement: DirectStatement, values: Any) -> tuple[str, list[Any]]:
        """``statement``'s SQL with ``$n`` placeholders, and its converted parameters in
        that order."""
        native = self._native.get(statement.sql)
        if native is None:
            if len(self._native) >= MAX_NATIVE_STATEMENTS:
                self._native.clear()  # a fixed set of statements comes here: this never churns
            native = self._native[statement.sql] = _numbered(statement.sql)
        sql, names = native
        converted = statement.parameters(values)
        return sql, [converted[name] for name in names]

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their statement ends)."""
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await connection.close()

    async def _run(self, sql: str, parameters: Any, *, fetch: bool) -> list[Any]:
        async with self._slots:
            connection, opened = await self._checkout()
            try:
                cursor = self._cursor(connection)
                await cursor.execute(sql, parameters)
                rows = list(await cursor.fetchall()) if fetch else []
                await cursor.close()
            except self._error as error:
                alive = not (connection.closed or connection.broken)
                if alive:
                    # Autocommit: a refused statement leaves the connection idle and usable.
                    self._idle.append((connection, opened))
                else:
                    await connection.close()
                    self._disconnects.dropped(opened)
                raise self._translated(error, sql, parameters, invalidated=not alive) from error
            except BaseException:
                await connection.close()  # cancelled mid-statement: never hand it out again
                raise
            self._idle.append((connection, opened))
            return rows

    async def _checkout(self) -> tuple[Any, int]:
        """An idle connection opened since the last disconnect, else a new one."""
        while self._idle:
            connection, opened = self._idle.pop()
            if not self._disconnects.stale(opened):
                return connection, opened
            await connection.close()
        # Stamped before connecting: a disconnect seen meanwhile makes it stale, not fresh.
        opened = self._disconnects.epoch
        try:
            return await self._connect(*self._args, **self._options), opened
        except self._error as error:  # refused, unreachable: as ``Engine.connect`` says it
            raise self._translated(error, None, None, invalidated=False) from error

    def _translated(
        self, error: Exception, sql: str | None, parameters: Any, *, invalidated: bool
    ) -> sa.exc.StatementError:
        translated = sa.exc.DBAPIError.instance(
            sql,
            parameters,
            error,
            self._error,
            hide_parameters=self._hide_parameters,
            connection_invalidated=invalidated,
            dialect=self._dialect,
        )
        return translated


_PYFORMAT = re.compile(r"%\((\w+)\)s|%%")


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` as SQLAlchemy compiles it for psycopg (``%(name)s`` parameters, ``%%`` for a
    literal ``%``) with ``$n`` placeholders instead; and the names, in ``$n`` order."""
    names: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            return "%"
        if name not in names:
            names[name] = len(names) + 1
        return f"${names[name]}"

    return _PYFORMAT.sub(number, sql), tuple(names)
