"""The one transaction policy of the SQL repositories (docs/decisions/0082): how a
transient lock is waited out, when a conflicting transaction is retried whole, and how a
read transaction begins.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Final, TypeVar

import sqlalchemy as sa

from contextstore.backends.sql.database import read_only
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.errors import is_conflict, is_lock
from contextstore.errors import BackendUnavailableError, ValidationError

__all__ = [
    "CONFLICT_ATTEMPTS",
    "IMMEDIATE_SECONDS",
    "LOCK_BACKOFF_SECONDS",
    "LOCK_RETRIES",
    "Sleep",
    "read_connection",
    "retry_conflicts",
    "retry_locks",
    "utc_now",
]

T = TypeVar("T")
Sleep = Callable[[float], None]

# SQLite can report "database is locked" at once, without consulting its busy handler (while
# another connection recovers the WAL, or a read snapshot went stale). Such an immediate
# failure is transient: retry it a few times, backing off. A failure that took at least
# IMMEDIATE_SECONDS means the busy timeout (30 s) already ran out: report it, not retry it.
LOCK_RETRIES: Final = 5
LOCK_BACKOFF_SECONDS: Final = 0.02
IMMEDIATE_SECONDS: Final = 1.0
# Whole-transaction attempts when a concurrent writer conflicts (PostgreSQL).
CONFLICT_ATTEMPTS: Final = 8
CONFLICT_BACKOFF_SECONDS: Final = 0.02


def utc_now() -> datetime:
    """Now, aware UTC: the default clock of every repository."""
    return datetime.now(UTC)


def retry_locks(engine: sa.Engine, attempt: Callable[[], T], sleep: Sleep) -> T:
    """``attempt()``, again after a transient lock (``is_lock``) that failed at once,
    waiting with ``sleep`` (the async repositories pass one that yields to the loop)."""
    dialect = dialect_of(engine)
    for retry in range(LOCK_RETRIES + 1):
        started = time.monotonic()
        try:
            return attempt()
        except Exception as error:
            immediate = time.monotonic() - started < IMMEDIATE_SECONDS
            if retry < LOCK_RETRIES and immediate and is_lock(dialect, error):
                sleep(LOCK_BACKOFF_SECONDS * 2**retry)
                continue
            raise
    raise AssertionError("unreachable")  # the loop returns or raises


def retry_conflicts(
    engine: sa.Engine, attempt: Callable[[], T], sleep: Sleep, *, attempts: int = CONFLICT_ATTEMPTS
) -> T:
    """``attempt()`` (a whole transaction), again after a conflict with a concurrent writer
    (``is_conflict``: a unique key, a serialization failure, a deadlock)."""
    dialect = dialect_of(engine)
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except (ValidationError, BackendUnavailableError) as error:
            if number == attempts or not is_conflict(dialect, error):
                raise
            sleep(CONFLICT_BACKOFF_SECONDS * number)
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def read_connection(
    engine: sa.Engine, *, snapshot: bool = False, report: bool = False
) -> Iterator[sa.Connection]:
    """A read-only transaction; with ``snapshot``, one snapshot for every statement in it;
    with ``report``, the dialect's settings for a report's sorts."""
    dialect = dialect_of(engine)
    with read_only(engine).connect() as connection:
        if snapshot:
            connection = dialect.snapshot(connection)
        with connection.begin():
            if report:
                dialect.tune_report(connection)
            yield connection
