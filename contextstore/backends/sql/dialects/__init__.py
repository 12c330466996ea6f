"""The dialect interface and its two implementations, chosen once per engine."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from contextstore.backends.sql.dialects.base import Dialect, ErrorCodes
from contextstore.backends.sql.dialects.postgresql import PostgreSQLDialect
from contextstore.backends.sql.dialects.sqlite import SQLiteDialect
from contextstore.errors import ConfigurationError

__all__ = ["DIALECTS", "Dialect", "ErrorCodes", "PostgreSQLDialect", "SQLiteDialect", "dialect_of"]

DIALECTS: Final[dict[str, Dialect]] = {
    dialect.name: dialect for dialect in (SQLiteDialect(), PostgreSQLDialect())
}


def dialect_of(bind: Dialect | sa.Engine | sa.Connection | sa.Dialect | str) -> Dialect:
    """The ``Dialect`` of an engine, a connection, SQLAlchemy's dialect or its name (a
    ``Dialect`` is its own); ``ConfigurationError`` for a database not supported."""
    if isinstance(bind, Dialect):
        return bind
    if isinstance(bind, str):
        name = bind
    elif isinstance(bind, sa.Dialect):
        name = bind.name
    else:
        name = bind.dialect.name
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigurationError(f"unsupported database dialect {name!r}") from None
