"""Redis work written once, performed by a sync or an asyncio driver (sans-I/O).

Every Redis-backed operation (a cache get, a windows record, a run's read phase) is a
generator: it yields the ``Call``s it needs, one round trip each, receives each reply (or
``FAILED``), and returns its result. It does no I/O itself. ``SyncDriver`` performs the
calls on a ``redis.Redis`` / ``RedisCluster``; ``AsyncDriver`` awaits them on their
``redis.asyncio`` twins. Both send the same commands, with the same keys, under the same
``FaultPolicy``; only the waiting differs. So the sync and async caches, windows and engines
cannot drift apart: there is one copy of what they do.

Faults: a call that fails with a Redis fault, or that the policy skips during the retry
interval, is answered with ``FAILED``; the operation decides its fallback (a miss, the local
windows) in the one place it is written.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

import redis.asyncio.cluster
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError

from contextstore.backends.batching import Batcher
from contextstore.backends.redis.client import (
    REDIS_FAULTS,
    AsyncRedisClient,
    FaultPolicy,
    RedisClient,
)
from contextstore.backends.redis.scripts import script

__all__ = ["CALLS_PER_PIPELINE", "FAILED", "AsyncDriver", "Call", "Ops", "SyncDriver"]

T = TypeVar("T")


class _Failed:
    """The reply of a call Redis did not answer (fault, or paused by the fault policy)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FAILED"


FAILED: Final = _Failed()

# Replies are read as bytes even from a decode_responses client: values carry a binary
# magic or binary doubles, and the operations decode text themselves.
_UNDECODED: Final[dict[str, Any]] = {NEVER_DECODE: True}


@dataclass(frozen=True, slots=True)
class Call:
    """One round trip: the script ``script`` (a file of ``redis/lua``) with ``keys``
    and ``args``, or, when ``script`` is ``None``, the plain command ``args``. ``what``
    names the operation in the fault policy's WARNING."""

    what: str
    script: str | None
    keys: tuple[bytes, ...] = ()
    args: tuple[bytes | int | str, ...] = ()


Ops = Generator[Call, object, T]


def _command(call: Call) -> tuple[Any, ...]:
    if call.script is None:
        return call.args
    return ("EVALSHA", script(call.script).sha, len(call.keys), *call.keys, *call.args)


def _with_source(call: Call) -> tuple[Any, ...]:
    """``EVAL`` with the source: runs the script and caches it on the node that owns the
    keys (the right node on a cluster too), after a NOSCRIPT."""
    assert call.script is not None, "plain commands never answer NOSCRIPT"
    return ("EVAL", script(call.script).source, len(call.keys), *call.keys, *call.args)


def _failed() -> object:
    return FAILED


class SyncDriver:
    """Performs operations on a redis-py client, one blocking round trip per ``Call``."""

    __slots__ = ("client", "fault")

    def __init__(self, client: RedisClient, fault: FaultPolicy) -> None:
        self.client = client
        self.fault = fault

    def run(self, ops: Ops[T]) -> T:
        """Drive ``ops`` to its result."""
        try:
            call = next(ops)
            while True:
                reply = self.fault.call(partial(self._execute, call), _failed, call.what)
                call = ops.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _execute(self, call: Call) -> object:
        client: Any = self.client  # redis-py types commands per client flavour
        try:
            return client.execute_command(*_command(call), **_UNDECODED)
        except NoScriptError:
            # A restarted server, a SCRIPT FLUSH, a cluster node that never saw it: send the
            # source once, so callers never see NOSCRIPT.
            return client.execute_command(*_with_source(call), **_UNDECODED)


CALLS_PER_PIPELINE = 64
"""Most calls of concurrent operations the async driver sends as one pipeline."""


class AsyncDriver:
    """Performs operations on a ``redis.asyncio`` client: the same calls, awaited.

    The calls of operations in flight at the same time are sent together: those made while
    a pipeline is out go as the next one (``backends.batching``), each still answered on
    its own (a fault fails every call of its pipeline, as it would each call alone). A lone
    call is sent at once, as a plain command. A cluster client sends each call alone: its
    calls go to the nodes owning their keys.
    """

    __slots__ = ("_batch", "client", "fault")

    def __init__(self, client: AsyncRedisClient, fault: FaultPolicy) -> None:
        self.client = client
        self.fault = fault
        self._batch: Batcher[Call, object] | None = None
        if not isinstance(client, redis.asyncio.cluster.RedisCluster):
            self._batch = Batcher(self._pipelined, limit=CALLS_PER_PIPELINE)

    async def run(self, ops: Ops[T]) -> T:
        """Drive ``ops`` to its result without blocking the event loop."""
        try:
            call = next(ops)
            while True:
                reply = await self.fault.acall(partial(self._execute, call), _failed, call.what)
                call = ops.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _execute(self, call: Call) -> object:
        if self._batch is not None:
            return await self._batch.submit(call)
        return await self._alone(call)

    async def _alone(self, call: Call) -> object:
        client: Any = self.client
        try:
            return await client.execute_command(*_command(call), **_UNDECODED)
        except NoScriptError:
            return await client.execute_command(*_with_source(call), **_UNDECODED)

    async def _pipelined(self, calls: list[Call]) -> list[object]:
        if len(calls) == 1:
            return [await self._alone(calls[0])]
        client: Any = self.client
        pipeline = client.pipeline(transaction=False)
        for call in calls:
            pipeline.execute_command(*_command(call), **_UNDECODED)
        replies: list[object] = await pipeline.execute(raise_on_error=False)
        for index, (call, reply) in enumerate(zip(calls, replies, strict=True)):
            if isinstance(reply, NoScriptError):
                try:
                    replies[index] = await client.execute_command(*_with_source(call), **_UNDECODED)
                except REDIS_FAULTS as error:
                    replies[index] = error
        return replies
