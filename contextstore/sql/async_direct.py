"""A run's statements on the event loop, sent on psycopg's own async connections.

``contextstore.sql.direct`` sends a run's two statements (its read and its metrics row) on
the pooled driver connection. Under the async engine that connection is SQLAlchemy's adapter
over psycopg's ``AsyncConnection``, reached through the greenlet bridge of
``contextstore.sql.aio``: a greenlet per call, a switch per wait, the adapter's cursor, the
pool's checkout, reset and return. Together they cost more CPU than psycopg's own work for
the statement (about 0.45 against 0.15 ms a statement, measured), and an event loop serving
many runs at once is limited by its CPU, not by the round trips it overlaps.

``DriverPool`` keeps ``AsyncConnection``s of its own, in autocommit, opened with the
arguments SQLAlchemy's dialect derives from the URL (server, user, password, options, type
adapters), and runs a ``DirectStatement``'s compiled SQL and converted parameters on them,
natively awaited. A driver error comes out as the ``sqlalchemy.exc.DBAPIError`` subclass
``Connection.execute`` would raise, so callers translate it exactly as for the sync path.

A connection the server dropped means a restart or a failover dropped the others too: as
SQLAlchemy's pool does on a disconnect, every connection opened before it is replaced at its
next use, in this pool and in the engine's (one invalidation time, the engine pool's, which
a disconnect seen by either pool moves). So one call fails, and the next ones, bridged or
direct, open new connections. A statement interrupted by a cancellation leaves its
connection in an unknown state: it is closed, not reused.

Statements go out with PostgreSQL's own ``$n`` placeholders on psycopg's raw cursor: the
compiled ``%(name)s`` form is rewritten once per statement, instead of psycopg parsing it on
every call (psycopg keeps parsed queries only up to 4,096 characters and 50 parameters,
which a group-committed INSERT of a few rows passes).

PostgreSQL only. aiosqlite runs each call on a thread of its own whatever calls it, so
SQLite's async statements stay on the bridge.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from contextstore.errors import ConfigurationError
from contextstore.sql.direct import DirectStatement

__all__ = ["DriverPool"]


class DriverPool:
    """At most ``size`` psycopg ``AsyncConnection``s to ``engine``'s PostgreSQL database,
    for ``DirectStatement``s; a caller beyond ``size`` waits for a free connection.

    Connections open on first need and stay open until ``aclose()``.
    """

    def __init__(self, engine: AsyncEngine, size: int) -> None:
        import psycopg

        sync = engine.sync_engine
        if sync.dialect.name != "postgresql":
            raise ConfigurationError(f"DriverPool serves PostgreSQL, not {sync.dialect.name}")
        self._connect = psycopg.AsyncConnection.connect
        self._cursor = psycopg.AsyncRawCursor
        self._error: type[Exception] = psycopg.Error
        self._dialect = sync.dialect
        self._hide_parameters = sync.hide_parameters
        args, options = sync.dialect.create_connect_args(sync.url)
        self._args = tuple(args)
        self._options = {**options, "autocommit": True}
        self._engine_pool = sync.pool
        self._idle: list[tuple[Any, float]] = []  # (connection, when it was opened)
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
                    # SQLAlchemy's own record of "connections before now are dead" (what
                    # ``Connection.execute`` sets on a disconnect): read back by _checkout.
                    self._engine_pool._invalidate(None)  # type: ignore[arg-type]
                raise self._translated(error, sql, parameters, invalidated=not alive) from error
            except BaseException:
                await connection.close()  # cancelled mid-statement: never hand it out again
                raise
            self._idle.append((connection, opened))
            return rows

    async def _checkout(self) -> tuple[Any, float]:
        """An idle connection opened since the last invalidation, else a new one."""
        while self._idle:
            connection, opened = self._idle.pop()
            if opened > self._engine_pool._invalidate_time:
                return connection, opened
            await connection.close()
        opened = time.time()  # the clock SQLAlchemy's pool stamps invalidations with
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
