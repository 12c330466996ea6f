"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from contextstore.backends.sql.dialects import dialect_of


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware instant that always comes back as an aware UTC ``datetime``.

    PostgreSQL stores ``timestamp with time zone`` natively. SQLite has no time zone type, so
    the value is stored as naive UTC text (``YYYY-MM-DD HH:MM:SS.ffffff``): such strings sort
    chronologically and keep microseconds, and UTC is re-attached when read. A naive
    ``datetime`` is refused (``ValueError``) rather than guessed at.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: a timezone-aware value is required")
        value = value.astimezone(UTC)
        return dialect_of(dialect).bound_instant(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
