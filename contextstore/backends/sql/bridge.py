"""How a sync repository is awaited on an event loop: SQLAlchemy's greenlet bridge.

``greenlet_spawn`` runs a sync method of a repository built on an async engine's
``sync_engine``; every statement is then awaited on the event loop by the async driver,
nothing blocks it, and the statements, validation, error translation and round trips are
exactly the sync repository's (the mechanism ``AsyncSession.run_sync`` is built on). A
retry that waits out a SQLite lock sleeps with ``asyncio.sleep`` (``async_sleep``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.util import await_only, greenlet_spawn

from contextstore.backends.batching import Batcher
from contextstore.backends.sql.async_direct import DriverPool
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.errors import translate_errors
from contextstore.backends.sql.lessons.candidates import ENTITY_ID, SCOPE_KEY

__all__ = ["READS_PER_STATEMENT", "Bridge", "CandidateReads", "Ready", "async_sleep"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
Ready = Callable[[], Awaitable[None]]

READS_PER_STATEMENT: Final = 64
"""Most concurrent runs' candidate reads one statement answers (``CandidateReads``)."""


def async_sleep(seconds: float) -> None:
    """``time.sleep`` for code running inside ``greenlet_spawn``: yields to the loop."""
    await_only(asyncio.sleep(seconds))


class Bridge(Generic[T]):
    """Awaits the methods of the sync ``target`` on the event loop; ``ready`` (optional) is
    awaited before each call (the store migrates there on first use)."""

    def __init__(self, target: T, ready: Ready | None) -> None:
        self._target = target
        self._ready = ready

    async def _run(self, method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self._ready is not None:
            await self._ready()
        result: R = await greenlet_spawn(functools.partial(method, *args, **kwargs))
        return result


class CandidateReads:
    """The candidate reads of concurrent runs, sent on ``pool`` as one statement over the
    union of their keys (``contextstore.backends.batching``).

    A candidate row is a lesson and one key of the read that it matched, so the rows of a
    run's own keys are exactly the rows its own statement would return; a row without an
    entity id (the knowledge generation of the joint read) belongs to every run.
    ``read(keys)`` gives the statement and its values for sorted keys (``candidates_read``).
    """

    def __init__(
        self,
        pool: DriverPool,
        read: Callable[[list[str]], tuple[DirectStatement, dict[str, Any]]],
        url: sa.URL,
    ) -> None:
        self._pool = pool
        self._statement_for = read
        self._url = url
        self._batch: Batcher[list[str], list[Any]] = Batcher(self._read, limit=READS_PER_STATEMENT)

    async def rows(self, keys: list[str]) -> list[Any]:
        """The rows ``statement`` returns for ``keys``."""
        return await self._batch.submit(keys)

    async def _read(self, reads: list[list[str]]) -> list[list[Any]]:
        union = sorted(set().union(*reads)) if len(reads) > 1 else reads[0]
        with translate_errors(self._url):
            rows = await self._pool.rows(*self._statement_for(union))
        if len(reads) == 1:
            return [rows]
        shared: list[Any] = []
        by_key: dict[str, list[Any]] = {}
        for row in rows:
            if row[ENTITY_ID] is None:
                shared.append(row)
            else:
                by_key.setdefault(row[SCOPE_KEY], []).append(row)
        return [[*shared, *(row for key in keys for row in by_key.get(key, ()))] for keys in reads]
