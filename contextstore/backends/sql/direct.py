"""A run's own statements, sent on the pooled driver connection.

``DirectStatement`` compiles a statement once and hands the driver its SQL and converted
parameters directly, on a connection checked out of the engine's own pool, skipping
``Connection.execute``'s per-call work (why, and what it saves:
``docs/decisions/0034-compiled-statements-straight-to-the-driver.md``). What the pool does
still applies: checkout events (SQLite's lenient decoding), reset on return.

- A driver error comes out as the ``sqlalchemy.exc.DBAPIError`` subclass
  ``Connection.execute`` raises (``OperationalError``, ``IntegrityError``, …), so callers
  translate and retry exactly as for any other statement.
- A connection found dropped is invalidated, and every connection of the engine opened
  before it is replaced at its next checkout (``disconnects``).
- Each statement runs in autocommit: PostgreSQL's connection is switched to it for the one
  statement (local to the client, no round trip) and back before it returns to the pool;
  SQLite's driver never begins a transaction of its own (``database._configure_sqlite``).
- Used from the async engine's ``sync_engine`` (inside SQLAlchemy's greenlet bridge, as every
  async repository call is), the same code awaits the asyncio driver.
- Statements sent this way do not pass SQLAlchemy's ``before_cursor_execute`` events; count
  them at the driver (SQLite's trace callback) or on the wire.

Only public SQLAlchemy API: the compiled statement's ``positiontup`` (documented for
positional paramstyles), the dialect's type processors, isolation and disconnect checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.disconnects import STAMP, disconnects

__all__ = ["DirectStatement"]


class DirectStatement:
    """``statement`` compiled for ``engine``'s dialect, run on a pooled driver connection.

    ``keys``: the parameter names every call passes (an INSERT compiles to the columns
    given, as ``Connection.execute`` would with those values).
    """

    __slots__ = (
        "_dbapi_error",
        "_defaults",
        "_dialect",
        "_engine",
        "_names",
        "_processors",
        "_reset",
        "sql",
    )

    def __init__(
        self, engine: sa.Engine, statement: sa.ClauseElement, keys: Sequence[str] | None = None
    ) -> None:
        dialect = engine.dialect
        compiled: Any = statement.compile(dialect=dialect, column_keys=keys)
        self._engine = engine
        self._dialect = dialect
        self.sql: str = compiled.string
        # Positional paramstyles (SQLite's qmark) take a tuple in this order; named ones a dict.
        self._names: tuple[str, ...] | None = (
            tuple(compiled.positiontup) if compiled.positional else None
        )
        # Each parameter's conversion to what the driver takes (timestamps, JSON, booleans),
        # exactly the one ``Connection.execute`` applies.
        self._processors: dict[str, Callable[[Any], Any]] = {}
        # Values written into the statement itself (``column == "text"``): sent with each call.
        self._defaults: dict[str, Any] = {
            name: bind.value
            for name, bind in compiled.binds.items()
            if not bind.required and bind.callable is None
        }
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                self._processors[name] = processor
        self._reset = dialect_of(dialect).direct_autocommit
        self._dbapi_error: type[Exception] = dialect.loaded_dbapi.Error

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """``values`` as the driver takes them."""
        processors = self._processors
        if self._defaults:
            values = {**self._defaults, **values}
        converted = {
            name: processors[name](value) if name in processors else value
            for name, value in values.items()
        }
        if self._names is None:
            return converted
        return tuple(converted[name] for name in self._names)

    def rows(self, values: Mapping[str, Any]) -> list[Any]:
        """Run the statement; its rows (tuples)."""
        return self._run(values, fetch=True)

    def execute(self, values: Mapping[str, Any]) -> None:
        """Run the statement, committed when this returns."""
        self._run(values, fetch=False)

    def _run(self, values: Mapping[str, Any], *, fetch: bool) -> list[Any]:
        parameters = self.parameters(values)
        dialect = self._dialect
        try:
            proxy = self._engine.raw_connection()
        except self._dbapi_error as error:  # refused, unreachable: as ``Engine.connect`` says it
            raise sa.exc.DBAPIError.instance(
                None, None, error, self._dbapi_error, dialect=dialect
            ) from error
        connection: Any = proxy.dbapi_connection
        cursor = None
        alive = True
        try:
            if self._reset:
                dialect.set_isolation_level(connection, "AUTOCOMMIT")
            cursor = proxy.cursor()
            cursor.execute(self.sql, parameters)
            rows = list(cursor.fetchall()) if fetch else []
            cursor.close()
            return rows
        except self._dbapi_error as error:
            alive = not dialect.is_disconnect(cast(Any, error), connection, cursor)
            if not alive:
                # A server that dropped this connection (a restart, a failover) dropped the
                # older ones too: each is replaced at its next checkout, not failing a call.
                disconnects(self._engine).dropped(proxy.info.get(STAMP, 0))
                proxy.invalidate(error)
            raise sa.exc.DBAPIError.instance(
                self.sql,
                parameters,
                error,
                self._dbapi_error,
                hide_parameters=self._engine.hide_parameters,
                connection_invalidated=not alive,
                dialect=dialect,
            ) from error
        finally:
            try:
                if self._reset and alive:
                    dialect.reset_isolation_level(connection)
            finally:
                proxy.close()
