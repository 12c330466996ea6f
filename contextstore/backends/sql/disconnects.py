"""Which connections of one database engine a dropped server connection made stale.

A server that dropped one connection (a restart, a failover) dropped every connection opened
before it too. Three paths hold connections to one engine's database: SQLAlchemy's own
statements, the direct statements (``direct``), and the async driver pool (``async_direct``),
whose connections SQLAlchemy's pool never sees. ``Disconnects`` is the record they share,
kept with SQLAlchemy's public pool and engine events only:

- each connection carries the epoch it was opened in (the pool's ``connect`` event; the
  driver pool stamps its own);
- a disconnect seen on any path starts a new epoch (``handle_error`` for SQLAlchemy's
  statements, ``dropped`` for the others), unless the connection that saw it was already
  stale: then its epoch has ended already, and the connections opened since are fine;
- a connection of an ended epoch is replaced at its next checkout: the pool's ``checkout``
  event raises ``DisconnectionError``, which the pool answers by reconnecting; the driver
  pool closes its own.

So one call fails, and the next ones, on any path, open new connections.
"""

from __future__ import annotations

import threading
from typing import Any, Final
from weakref import WeakKeyDictionary

import sqlalchemy as sa

__all__ = ["STAMP", "Disconnects", "disconnects"]

STAMP: Final = "contextstore_epoch"
"""The key of a pooled connection's ``info`` that holds the epoch it was opened in."""


class Disconnects:
    """The current epoch of one engine's connections; starts at 0."""

    def __init__(self) -> None:
        self.epoch = 0
        self._lock = threading.Lock()

    def stale(self, stamp: int) -> bool:
        """Whether a connection opened in epoch ``stamp`` must be replaced."""
        return stamp < self.epoch

    def dropped(self, stamp: int | None) -> None:
        """A connection opened in epoch ``stamp`` (``None``: not known) was found dropped."""
        with self._lock:
            if stamp is None or stamp >= self.epoch:
                self.epoch += 1


_RECORDS: WeakKeyDictionary[sa.Engine, Disconnects] = WeakKeyDictionary()
_INSTALLING = threading.Lock()


def disconnects(engine: sa.Engine) -> Disconnects:
    """The record of ``engine`` (an ``AsyncEngine``'s ``sync_engine`` for the async one),
    its event listeners installed the first time it is asked for."""
    with _INSTALLING:
        record = _RECORDS.get(engine)
        if record is None:
            record = _RECORDS[engine] = Disconnects()
            _listen(engine, record)
    return record


def _listen(engine: sa.Engine, record: Disconnects) -> None:
    def stamp(dbapi_connection: Any, entry: Any) -> None:
        entry.info[STAMP] = record.epoch

    def check(dbapi_connection: Any, entry: Any, proxy: Any) -> None:
        # A connection opened before the listeners were installed counts as epoch 0.
        if record.stale(entry.info.get(STAMP, 0)):
            raise sa.exc.DisconnectionError("opened before the server dropped a connection")

    def seen(context: sa.engine.ExceptionContext) -> None:
        if not context.is_disconnect:
            return
        connection = context.connection
        opened = None
        if connection is not None and not connection.invalidated:
            opened = connection.info.get(STAMP, 0)
        record.dropped(opened)

    sa.event.listen(engine, "connect", stamp)
    sa.event.listen(engine, "checkout", check)
    sa.event.listen(engine, "handle_error", seen)
