"""The shared record of dropped connections (``backends.sql.disconnects``), on SQLite.

What a real disconnect does end to end (a server dropping every connection, seen by a
direct, a bridged or a driver-pool call) is pinned on PostgreSQL in ``test_direct_statements``;
here the record itself: epochs, replacement at checkout, and no second epoch for a
connection that was stale already.
"""

from __future__ import annotations

import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.disconnects import STAMP, disconnects
from tests.backends.sql.conftest import SQLITE_ONLY

pytestmark = SQLITE_ONLY


def opened(engine: sa.Engine) -> list[object]:
    """The driver connections ``engine``'s pool opens from now on, in order."""
    seen: list[object] = []
    sa.event.listen(engine, "connect", lambda dbapi, entry: seen.append(dbapi))
    return seen


def checked_out(engine: sa.Engine) -> tuple[object, int]:
    """(the driver connection a checkout gives, its epoch), returned to the pool at once."""
    proxy = engine.raw_connection()
    try:
        return proxy.dbapi_connection, proxy.info[STAMP]
    finally:
        proxy.close()


def test_connections_of_an_ended_epoch_are_replaced_at_their_next_checkout(
    engine: sa.Engine,
) -> None:
    record = disconnects(engine)
    assert disconnects(engine) is record and record.epoch == 0
    new = opened(engine)
    first, epoch = checked_out(engine)
    assert (new, epoch) == ([first], 0)
    assert checked_out(engine) == (first, 0)  # pooled: the same connection again
    record.dropped(0)
    assert record.epoch == 1
    second, epoch = checked_out(engine)
    assert second is not first and new == [first, second] and epoch == 1
    assert checked_out(engine) == (second, 1)
    # Statements keep working on the replacement.
    assert DirectStatement(engine, sa.text("SELECT 1")).rows({}) == [(1,)]
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT 2")).scalar() == 2
    assert len(new) == 2


def test_a_connection_that_was_stale_already_starts_no_new_epoch(engine: sa.Engine) -> None:
    record = disconnects(engine)
    record.dropped(0)  # the first connection of epoch 0 saw the disconnect
    record.dropped(0)  # a second one of epoch 0 sees it too: nothing more is stale
    assert record.epoch == 1
    record.dropped(1)  # one opened since: a new disconnect
    record.dropped(None)  # not known which: counted as new
    assert record.epoch == 3
    assert record.stale(2) and not record.stale(3)


def test_each_engine_has_a_record_of_its_own(engine: sa.Engine, database_url: str) -> None:
    other = create_database_engine(database_url)
    try:
        disconnects(engine).dropped(None)
        assert (disconnects(engine).epoch, disconnects(other).epoch) == (1, 0)
        first, _ = checked_out(other)
        assert checked_out(other)[0] is first
    finally:
        other.dispose()
