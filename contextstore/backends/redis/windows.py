"""The adaptive rolling windows in Redis, shared by every process of a namespace
(docs/design/cache-and-windows.md).

Same contract as ``MemoryWindows`` (see ``contextstore.backends.windows``), with these
Redis-specific facts:

- Everything lives in one hash, ``cs:{ns}:win``: a ring of the last ``WINDOW`` samples and
  one ``agg`` field holding the total and the window's sums, all as little-endian binary
  doubles (schema in ``contextstore.backends.redis.keys``): exact, and nothing formats or parses
  numbers as text. Replies are read undecoded, so a ``decode_responses`` client works too.
- ``record`` is one Lua script, one round trip (``redis/lua/windows_record.lua``):
  it writes the sample over the oldest one, increments the namespace's total and returns
  the summary, so the ``total_queries`` a process sees is the fleet-wide count including
  its own record: exactly one process sees 20, one sees 40, and so on.
- ``summary`` is one ``HGET`` of the ``agg`` field (no script, no scan): as cheap as a plain
  ``GET``. Means are the sums divided by the sample count; sums of floats kept
  incrementally may differ from ``MemoryWindows``' ``fsum`` in the last few bits.
- Redis unreachable or failing: ``record`` and ``summary`` use a process-local
  ``MemoryWindows`` instead (so ``total_queries`` is then this process's count during the
  outage, and auto-tune runs on it). Those samples are not merged back: when Redis answers
  again the shared windows resume where the fleet left them and the local ones are
  discarded. ``clear`` clears the local windows and, if reachable, the shared ones.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.redis.client import (
    DEFAULT_RETRY_INTERVAL,
    AsyncRedisClient,
    FaultPolicy,
    RedisClient,
    async_client_from_url,
    client_from_url,
)
from contextstore.backends.redis.keys import NamespaceKeys
from contextstore.backends.redis.ops import FAILED, AsyncDriver, Call, Ops, SyncDriver
from contextstore.backends.resources import Closeable
from contextstore.backends.windows import (
    EMPTY_SUMMARY,
    WINDOW,
    AsyncWindows,
    Sample,
    Windows,
    WindowSummary,
)
from contextstore.config import DEFAULT_NAMESPACE

__all__ = ["AsyncRedisWindows", "RedisWindows", "pack_sample"]

# The stored layout (see windows_record.lua): little-endian doubles, exact for every value.
_AGG = struct.Struct("<6d")  # total, samples in the window, resp, len, chunks, fails sums
_SAMPLE = struct.Struct("<4d")  # response_ms, context_length, chunk_count, failed (0 or 1)


def _summarise(agg: object) -> WindowSummary:
    """Summary from the 48-byte ``agg`` (``_AGG``: total, n and the four sums).

    ``None`` (no record yet, or cleared), and anything but 48 bytes of sane counts (planted
    data, the text layout of earlier versions), is the empty summary.
    """
    if not isinstance(agg, bytes) or len(agg) != _AGG.size:
        return EMPTY_SUMMARY
    total, n, resp, length, chunks, fails = _AGG.unpack(agg)
    try:
        samples, total_queries = int(n), int(total)
    except (ValueError, OverflowError):  # planted bytes, nan, inf: never an exception
        return EMPTY_SUMMARY
    if samples <= 0:
        return WindowSummary(total_queries, 0, 0.0, 0.0, 0.0, 0.0)
    return WindowSummary(
        total_queries=total_queries,
        samples=samples,
        avg_response_ms=resp / samples,
        avg_context_length=length / samples,
        avg_chunk_count=chunks / samples,
        guard_failure_rate=fails / samples,
    )


def pack_sample(sample: Sample) -> bytes:
    """The 32 bytes ``windows_record.lua`` stores for ``sample``."""
    return _SAMPLE.pack(
        float(sample.response_ms),
        int(sample.context_length),
        int(sample.chunk_count),
        0 if sample.guard_passed else 1,
    )


class _WindowsOps:
    """What the Redis windows do, once, as ``contextstore.backends.redis.ops`` generators; the sync
    and async classes add only a driver. Holds the local fallback windows."""

    window = WINDOW

    def __init__(self, namespace: str, retry_interval: float, fault: FaultPolicy | None) -> None:
        self.keys = NamespaceKeys.of(namespace)
        self.fault = fault if fault is not None else FaultPolicy(retry_interval)
        self._owns_client = False
        self.key = self.keys.windows.encode()  # encoded once, not by redis-py on every call
        self._fallback = MemoryWindows()
        self._fallback_used = False

    def record_ops(self, sample: Sample) -> Ops[WindowSummary]:
        agg = yield Call(
            "adaptive record", "windows_record.lua", (self.key,), (pack_sample(sample), self.window)
        )
        return self.recorded(agg, sample)

    def recorded(self, agg: object, sample: Sample) -> WindowSummary:
        """The summary a record's reply gives (the local windows record it after a fault)."""
        if agg is FAILED:
            return self._local().record(sample)
        self._shared_again()
        return _summarise(agg)

    def summary_ops(self) -> Ops[WindowSummary]:
        agg = yield Call("adaptive summary", None, args=("HGET", self.key, b"agg"))
        return self.summarised(agg)

    def summarised(self, agg: object) -> WindowSummary:
        """The summary a read of ``agg`` gives (the local one after a fault)."""
        if agg is FAILED:
            return self._local().summary()
        self._shared_again()
        return _summarise(agg)

    def clear_ops(self) -> Ops[None]:
        self._fallback.clear()
        yield Call("adaptive clear", None, args=("DEL", self.key))

    def _local(self) -> MemoryWindows:
        self._fallback_used = True
        return self._fallback

    def _shared_again(self) -> None:
        # The outage's local samples are not merged into the shared windows (see module doc).
        if self._fallback_used:
            self._fallback_used = False
            self._fallback = MemoryWindows()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.keys.namespace!r})"


class RedisWindows(_WindowsOps, Windows, Closeable):
    """Four rolling windows of ``WINDOW`` runs and a total, in Redis, shared by a namespace.

    ``client`` is a ``redis.Redis`` (or fakeredis) or ``redis.cluster.RedisCluster`` with
    short timeouts (``client_from_url``). ``fault`` lets a cache and windows on one client
    share one fault policy; otherwise the windows get their own, with ``retry_interval``
    seconds of cool-down. A bad namespace raises ``ConfigurationError``. Constructing does no
    network I/O. Thread-safe.
    """

    def __init__(
        self,
        client: RedisClient,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        fault: FaultPolicy | None = None,
    ) -> None:
        super().__init__(namespace, retry_interval, fault)
        self.client = client
        self.driver = SyncDriver(client, self.fault)

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> RedisWindows:
        """Windows on a new client for ``url`` (see ``client_from_url``); ``close()`` closes it.

        ``kwargs`` go to the constructor (``namespace``, ``retry_interval``, ``fault``),
        ``client_options`` to the client. ``ConfigurationError`` for a bad URL.
        """
        windows = cls(client_from_url(url, **dict(client_options or {})), **kwargs)
        windows._owns_client = True
        return windows

    def record(self, sample: Sample) -> WindowSummary:
        """Append ``sample``; the summary with the fleet's new total (local one in an outage)."""
        return self.driver.run(self.record_ops(sample))

    def summary(self) -> WindowSummary:
        """The shared summary (the process-local one while Redis is unreachable)."""
        return self.driver.run(self.summary_ops())

    def clear(self) -> None:
        """Forget every sample and reset the total, shared and local (shared: if reachable)."""
        self.driver.run(self.clear_ops())

    def close(self) -> None:
        """Close the client if ``from_url`` made it; a client passed in is the caller's."""
        if self._owns_client:
            self.client.close()


class AsyncRedisWindows(_WindowsOps, AsyncWindows):
    """``RedisWindows`` on a ``redis.asyncio`` client: same contract and keys, awaited."""

    def __init__(
        self,
        client: AsyncRedisClient,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        fault: FaultPolicy | None = None,
    ) -> None:
        super().__init__(namespace, retry_interval, fault)
        self.client = client
        self.driver = AsyncDriver(client, self.fault)

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AsyncRedisWindows:
        """Windows on a new asyncio client for ``url``; ``aclose()`` closes it."""
        windows = cls(async_client_from_url(url, **dict(client_options or {})), **kwargs)
        windows._owns_client = True
        return windows

    async def record(self, sample: Sample) -> WindowSummary:
        return await self.driver.run(self.record_ops(sample))

    async def summary(self) -> WindowSummary:
        return await self.driver.run(self.summary_ops())

    async def clear(self) -> None:
        await self.driver.run(self.clear_ops())

    async def aclose(self) -> None:
        """Close the client if ``from_url`` made it; a client passed in is the caller's."""
        if self._owns_client:
            await self.client.aclose()
