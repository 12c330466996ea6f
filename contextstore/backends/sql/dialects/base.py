"""The one interface behind which SQLite and PostgreSQL differ (docs/decisions/0082).

Every statement fragment, setting and policy that is not the same on both databases is a
method here, implemented once per database (``sqlite.SQLiteDialect``,
``postgresql.PostgreSQLDialect``) and chosen once per engine by ``dialect_of``. The
repositories ask the dialect; they never compare dialect names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

__all__ = ["Dialect", "ErrorCodes"]


@dataclass(frozen=True)
class ErrorCodes:
    """What a database's driver errors mean (``contextstore.backends.sql.errors`` reads them).

    ``locked``: message fragments (lower case) of a lock another connection holds that a
    retry may get; ``conflicts``: SQLSTATEs of a conflict with a concurrent transaction that
    retrying the whole transaction resolves; ``undecodable``: message fragments of stored
    text the driver could not decode.
    """

    locked: tuple[str, ...] = ()
    conflicts: frozenset[str] = frozenset()
    undecodable: tuple[str, ...] = ()


class Dialect(ABC):
    """What differs between the supported databases; one stateless instance per database."""

    name: ClassVar[str]
    errors: ClassVar[ErrorCodes]
    async_driver: ClassVar[str | None]
    """The ``drivername`` an async engine's URL is given (``None``: the URL's own)."""
    default_driver: ClassVar[str]
    """The driver a normalised URL names."""
    driver_extra: ClassVar[tuple[str, str, str] | None]
    """What a missing ``default_driver`` is reported as (``MissingExtraError``'s service,
    driver and extra); ``None``: it ships with Python."""
    serves_driver_pool: ClassVar[bool]
    """Whether ``async_direct.DriverPool`` may send statements on the driver directly."""
    chunks_imports: ClassVar[bool]
    """Whether a large lesson import writes in short transactions with pauses between them
    (one writer at a time holds the whole database: other writers must get their turns)."""
    direct_autocommit: ClassVar[bool]
    """Whether a statement sent on a pooled driver connection (``direct.DirectStatement``)
    switches it to autocommit first (the pool's reset switches it back); ``False``: the
    driver never begins a transaction of its own there."""
    is_file: ClassVar[bool]
    """Whether the database is a file each process opens itself (its path in the URL), not
    a server: processes share it through that path."""
    grants_roles: ClassVar[bool]
    """Whether the database has login roles a service can be granted less than the owner
    (``roles.grant_service_role``); ``False``: whoever can write the file owns it."""

    # -- connections and transactions ---------------------------------------------------

    @abstractmethod
    def check_url(self, url: sa.URL) -> None:
        """Refuse (``ConfigurationError``) a URL that cannot work, before connecting."""

    @abstractmethod
    def configure(self, engine: sa.Engine) -> None:
        """Set up a new engine's connections (``create_database_engine``)."""

    @abstractmethod
    def decode_leniently(self, engine: sa.Engine) -> bool:
        """Read stored text that is not UTF-8 from now on, as lone surrogates the readers
        step around; ``False`` when the database cannot or already does."""

    @abstractmethod
    def autocommit(self, engine: sa.Engine) -> sa.Engine:
        """``engine`` (same pool) with each statement its own transaction."""

    @abstractmethod
    def snapshot(self, connection: sa.Connection) -> sa.Connection:
        """``connection`` whose next transaction reads one snapshot for every statement."""

    @abstractmethod
    def tune_report(self, connection: sa.Connection) -> None:
        """Settings a report's read transaction runs with (inside the transaction)."""

    @abstractmethod
    def lock_migrations(self, connection: sa.Connection) -> None:
        """Make concurrent migrators wait for this transaction."""

    @abstractmethod
    def locked_for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` locking the rows it reads until the transaction ends, where needed."""

    @abstractmethod
    def checkpoint(self, engine: sa.Engine) -> None:
        """Copy what the last transactions wrote into the database file, if the database
        keeps a write-ahead log the next writer would otherwise copy."""

    # -- the audit actor ----------------------------------------------------------------

    @abstractmethod
    def name_actor(self, session: Session, actor: str) -> None:
        """Tell the audit triggers who writes in this transaction."""

    @abstractmethod
    def forget_actor(self, session: Session) -> None:
        """Undo ``name_actor`` before the transaction goes on with writes not ours."""

    # -- statement fragments ------------------------------------------------------------

    @abstractmethod
    def by_code_point(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """``column`` ordered by code point, as the matcher orders ties."""

    @abstractmethod
    def json_as_text(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """A JSON column fetched as its text, so the driver does not decode it."""

    @abstractmethod
    def safe_timestamp(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """A timestamp column fetched in a form the driver cannot fail on."""

    @abstractmethod
    def unindexed(self, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
        """``column`` as a term the planner may not answer from an index (where the
        planner has such a term), so it keeps to another index it would otherwise leave."""

    @abstractmethod
    def json_array_holds(self, column: Any, value: str) -> sa.ColumnElement[bool]:
        """True when the JSON array ``column`` holds the string ``value``."""

    @abstractmethod
    def typed_null(self, sql_type: str) -> str:
        """SQL text of a NULL of ``sql_type``, where a column of a UNION is typed from
        both halves and a bare NULL would not match the other half's type."""

    @abstractmethod
    def bound_instant(self, value: datetime) -> datetime:
        """An aware UTC instant as the driver is handed it (``types.UTCDateTime``)."""

    @abstractmethod
    def insert(self) -> Callable[[sa.Table], Any]:
        """The dialect's INSERT construct (with its ON CONFLICT clause)."""

    # -- the candidate read -------------------------------------------------------------

    @abstractmethod
    def candidate_sql(self, extra: str = "", *, any_status: bool = False) -> str:
        """The candidate lookup's SQL text (see ``lessons.queries``); ``extra``
        (``", <expression>"``) adds a column; ``any_status`` keeps lessons of every status
        and adds the status as the seventh column."""

    @abstractmethod
    def keys_parameter(self, keys: Sequence[str]) -> list[str] | str:
        """The ``:keys`` value of ``candidate_sql``."""
