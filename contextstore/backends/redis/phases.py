"""A run's state in two Redis round trips: one script for the read phase, one for the write.

``FusedRunState`` and ``AsyncFusedRunState`` implement the engine's run-state port for a
Redis cache and Redis windows that share one client, one namespace and one fault policy (as
``connect()`` wires them; ``fused_state`` and ``async_fused_state`` check it):

- read: ``run_read.lua`` returns the cache entry and the windows' summary together;
- write: ``run_write.lua`` stores the entry (when the guard passed) and records the sample,
  returning the fleet's new total.

Each does exactly what the separate operations would (the scripts include the same Lua
functions), so the fleet-wide LRU, the exact totals and "every 20th run tunes once" are
unchanged. A fault answers as the separate operations do: a miss, and the process-local
windows. Written once as ``contextstore.backends.redis.ops`` generators for both flavours.
"""

from __future__ import annotations

from typing import TypeAlias, cast

from contextstore.backends.redis.cache import (
    MAGIC,
    AsyncRedisContextCache,
    RedisContextCache,
    encode_text,
)
from contextstore.backends.redis.ops import FAILED, Call, Ops
from contextstore.backends.redis.windows import AsyncRedisWindows, RedisWindows, pack_sample
from contextstore.backends.windows import Sample, WindowSummary

__all__ = [
    "AsyncFusedRunState",
    "FusedRunState",
    "async_fused_state",
    "fused_state",
    "read_ops",
    "write_ops",
]

Cache: TypeAlias = RedisContextCache | AsyncRedisContextCache
Windows: TypeAlias = RedisWindows | AsyncRedisWindows


def _shared(cache: Cache, windows: Windows) -> bool:
    """Same client, same namespace (so same cluster slot), same fault policy."""
    return (
        cache.client is windows.client
        and cache.keys.namespace == windows.keys.namespace
        and cache.fault is windows.fault
    )


def fused_state(cache: object, windows: object) -> FusedRunState | None:
    """The fused run state of ``cache`` and ``windows``, or ``None`` when they cannot share
    the phase scripts (either not in Redis, or on another client, namespace or policy)."""
    if (
        isinstance(cache, RedisContextCache)
        and isinstance(windows, RedisWindows)
        and _shared(cache, windows)
    ):
        return FusedRunState(cache, windows)
    return None


def async_fused_state(cache: object, windows: object) -> AsyncFusedRunState | None:
    """``fused_state`` for the asyncio cache and windows."""
    if (
        isinstance(cache, AsyncRedisContextCache)
        and isinstance(windows, AsyncRedisWindows)
        and _shared(cache, windows)
    ):
        return AsyncFusedRunState(cache, windows)
    return None


class FusedRunState:
    """The engine's ``RunState`` port in one script call per phase (see the module doc)."""

    __slots__ = ("cache", "windows")

    def __init__(self, cache: RedisContextCache, windows: RedisWindows) -> None:
        self.cache = cache
        self.windows = windows

    def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]:
        if cache_key is None and not want_summary:
            return None, None
        return self.cache.driver.run(read_ops(self.cache, self.windows, cache_key, want_summary))

    def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None:
        if cache_key is None or (context is None and sample is None):
            return None if sample is None else self.windows.record(sample)
        return self.cache.driver.run(
            write_ops(self.cache, self.windows, cache_key, context, sample)
        )


class AsyncFusedRunState:
    """``FusedRunState`` on ``redis.asyncio``: the engine's ``AsyncRunState`` port."""

    __slots__ = ("cache", "windows")

    def __init__(self, cache: AsyncRedisContextCache, windows: AsyncRedisWindows) -> None:
        self.cache = cache
        self.windows = windows

    async def read(
        self, cache_key: str | None, want_summary: bool
    ) -> tuple[str | None, WindowSummary | None]:
        if cache_key is None and not want_summary:
            return None, None
        ops = read_ops(self.cache, self.windows, cache_key, want_summary)
        return await self.cache.driver.run(ops)

    async def write(
        self, cache_key: str | None, context: str | None, sample: Sample | None
    ) -> WindowSummary | None:
        if cache_key is None or (context is None and sample is None):
            return None if sample is None else await self.windows.record(sample)
        ops = write_ops(self.cache, self.windows, cache_key, context, sample)
        return await self.cache.driver.run(ops)


def _keys(cache: Cache, windows: Windows, member: bytes) -> tuple[bytes, ...]:
    return (*cache.entry_keys(member), windows.key)


def read_ops(
    cache: Cache, windows: Windows, key: str | None, want_summary: bool
) -> Ops[tuple[str | None, WindowSummary | None]]:
    """(cached text or ``None``, summary or ``None``). ``key=None`` reads no entry;
    ``want_summary=False`` reads no summary."""
    member = b"" if key is None else encode_text(key)
    reply = yield Call(
        "run read",
        "run_read.lua",
        _keys(cache, windows, member),
        (member, MAGIC, int(want_summary)),
    )
    value: object = FAILED
    agg: object = FAILED
    if reply is not FAILED:
        value, agg = cast("tuple[object, object]", reply)
    text = None if key is None else (yield from cache.decode_hit(value, member))
    summary = windows.summarised(agg) if want_summary else None
    return text, summary


def write_ops(
    cache: Cache, windows: Windows, key: str, context: str | None, sample: Sample | None
) -> Ops[WindowSummary | None]:
    """Cache ``context`` under ``key`` (``None``: cache nothing) and record ``sample``
    (``None``: record nothing); returns the summary after the record, else ``None``."""
    member = encode_text(key)
    value = b"" if context is None else cache.value(context)
    packed = b"" if sample is None else pack_sample(sample)
    reply = yield Call(
        "run write",
        "run_write.lua",
        _keys(cache, windows, member),
        (*cache.put_args(member, value), packed, windows.window),
    )
    if sample is None:
        return None
    agg = FAILED if reply is FAILED else cast("tuple[object, object]", reply)[1]
    return windows.recorded(agg, sample)
