"""Batching: the requests of concurrent callers on one event loop, sent together.

An event loop serving many runs at once is limited by its CPU, and much of a run's CPU is
per request, not per item: a driver round trip to send and await, a commit, a pipeline to
flush. ``Batcher`` sends the items submitted while the previous batch was in flight as the
next batch, with one ``send``: a lone caller's item goes at once, as it would alone; under
load, batches grow by themselves, with no timer and no added wait.

Each caller still gets its own outcome: ``send`` answers each item with its result or its
exception. When ``send`` raises for the whole batch, every caller gets that exception,
unless ``alone(error)`` says the error may belong to one item only (a row a constraint
refuses, say): then each item is sent again on its own, so only its caller fails. A caller
cancelled while its batch is in flight does not withdraw its item. If the sender itself is
cancelled (its event loop shutting down), every caller still waiting, in flight or queued,
is cancelled: none waits forever.

Used for the async engine's metrics rows (one multi-row INSERT) and, on PostgreSQL, lesson
reads (one statement over the union of the runs' keys), both in ``backends.sql.aio``, and
for its Redis calls (one pipeline, ``contextstore.backends.redis.ops``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Batcher"]

T = TypeVar("T")
R = TypeVar("R")


def _never(error: BaseException) -> bool:
    return False


class Batcher(Generic[T, R]):
    """``await submit(item)`` → ``item``'s outcome, from ``send(items)`` of a batch of at most
    ``limit`` items (see the module doc). One instance serves one event loop."""

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        limit: int,
        alone: Callable[[BaseException], bool] = _never,
    ) -> None:
        self._send = send
        self._limit = limit
        self._alone = alone
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """``item``'s outcome: its result, or its exception raised."""
        outcome: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, outcome))
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._drain())
        return await outcome

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._limit]
                del self._queue[: self._limit]
                await self._flush(batch)
        finally:
            self._sender = None
            # Only a sender cancelled (or failing) midway leaves items queued behind its
            # batch; nothing would ever send them, so their callers are cancelled too
            # rather than left waiting forever.
            queued, self._queue = self._queue, []
            for _, outcome in queued:
                outcome.cancel()

    async def _flush(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            outcomes = await self._send([item for item, _ in batch])
        except asyncio.CancelledError:
            for _, outcome in batch:
                outcome.cancel()
            raise
        except Exception as error:
            if len(batch) > 1 and self._alone(error):
                for one in batch:
                    await self._flush([one])
                return
            outcomes = [error] * len(batch)
        for (_, outcome), result in zip(batch, outcomes, strict=True):
            if outcome.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(result, BaseException):
                outcome.set_exception(result)
            else:
                outcome.set_result(result)
