"""A run's two Redis round trips: the read phase and the write phase (SPEC §8).

When the cache and the adaptive windows are both in Redis, on one client, in one namespace,
under one fault policy (as ``connect()`` wires them), an engine run needs exactly two calls:

- ``read_ops``: ``run_read.lua`` returns the cache entry and the windows' summary together;
- ``write_ops``: ``run_write.lua`` stores the entry (when the guard passed) and records the
  sample, returning the fleet's new total.

Each does exactly what the separate operations would (the scripts include the same Lua
functions), so the fleet-wide LRU, the exact totals and "every 20th run tunes once" are
unchanged. A fault answers as the separate operations do: a miss, and the process-local
windows. Written once as ``contextstore.redis.ops`` generators for both engines.
"""

from __future__ import annotations

from typing import TypeAlias, cast

from contextstore.adaptive.base import Sample, WindowSummary
from contextstore.redis.cache import MAGIC, AsyncRedisContextCache, RedisContextCache, encode_text
from contextstore.redis.ops import FAILED, Call, Ops
from contextstore.redis.windows import AsyncRedisWindows, RedisWindows, pack_sample

__all__ = ["read_ops", "shared_phases", "write_ops"]

Cache: TypeAlias = RedisContextCache | AsyncRedisContextCache
Windows: TypeAlias = RedisWindows | AsyncRedisWindows


def shared_phases(cache: object, windows: object) -> bool:
    """True when ``cache`` and ``windows`` can share the phase scripts: both Redis-backed,
    same client, same namespace (so same cluster slot), same fault policy."""
    pairs = ((RedisContextCache, RedisWindows), (AsyncRedisContextCache, AsyncRedisWindows))
    return any(
        isinstance(cache, cache_type)
        and isinstance(windows, windows_type)
        and cache.client is windows.client
        and cache.keys.namespace == windows.keys.namespace
        and cache.fault is windows.fault
        for cache_type, windows_type in pairs
    )


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
