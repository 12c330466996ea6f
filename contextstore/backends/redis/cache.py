"""The context cache in Redis, shared by every process of a namespace
(docs/design/cache-and-windows.md, docs/design/failures.md).

Same contract as ``MemoryContextCache`` (see ``contextstore.backends.cache``), with these
Redis-specific facts:

- Entries live in ``cs:{ns}:cache:e:<key>`` with Redis's own TTL (``PX``): an entry older
  than ``ttl_seconds`` is gone on the server's clock, whichever process wrote it. Recency is a
  zset scored from a per-namespace sequence, so the LRU order is fleet-wide and no client
  clock is involved; a second zset of deadlines (server clock) lets a put into a full cache
  find expired entries without a scan. Hits and misses are counted in one shared hash.
- ``get``, ``put``, ``stats`` and ``clear`` are each one Lua script, one round trip, atomic
  (scripts in ``redis/lua/cache_*.lua``, keys in ``contextstore.backends.redis.keys``).
- ``AsyncRedisContextCache`` is the same cache on a ``redis.asyncio`` client: the same
  operations (``_CacheOps``, written once as ``contextstore.backends.redis.ops`` generators), the
  same scripts, keys and fault policy, awaited instead of blocking.
- Values are stored as ``ENTRY_MAGIC`` + UTF-8 text. A stored value without the magic (a
  planted pickle, another tool's data, a key of another type) or whose text is not UTF-8 is
  a miss, deleted, counted as a miss; nothing is ever unpickled. Only that last, forged case
  costs a second round trip (to re-count the get as a miss).
- All processes of a namespace should use the same ``max_size`` and ``ttl_seconds``; each put
  enforces the ``max_size`` of the object that makes it.
- Redis unreachable or failing: ``get`` is a miss (not counted in the shared stats: they are
  unreachable), ``put`` and ``clear`` do nothing, ``stats`` repeats the last figures it read
  (zeros before any). ``stats["errors"]`` counts failed Redis operations. See ``FaultPolicy``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from contextstore.backends.cache import (
    DEFAULT_MAX_SIZE,
    DEFAULT_TTL_SECONDS,
    AsyncContextCache,
    ContextCache,
    check_sizes,
    format_hit_rate,
)
from contextstore.backends.redis.client import (
    DEFAULT_RETRY_INTERVAL,
    AsyncRedisClient,
    FaultPolicy,
    RedisClient,
    async_client_from_url,
    client_from_url,
)
from contextstore.backends.redis.keys import ENTRY_MAGIC, NamespaceKeys
from contextstore.backends.redis.ops import FAILED, AsyncDriver, Call, Ops, SyncDriver
from contextstore.backends.resources import Closeable
from contextstore.config import DEFAULT_NAMESPACE
from contextstore.errors import ValidationError

__all__ = ["AsyncRedisContextCache", "RedisContextCache"]

MAGIC = ENTRY_MAGIC.encode("ascii")
_MAGIC_LENGTH = len(ENTRY_MAGIC)


def encode_text(text: str) -> bytes:
    # surrogatepass: any Python str round-trips, as it does in the memory cache.
    return text.encode("utf-8", "surrogatepass")


class _CacheOps:
    """What the Redis cache does, once, as ``contextstore.backends.redis.ops`` generators.

    Holds the sizes, the keys (encoded once: redis-py would otherwise encode every key on
    every call) and the fault policy; the sync and async classes add only a driver.
    """

    def __init__(
        self,
        namespace: str,
        max_size: int,
        ttl_seconds: float,
        retry_interval: float,
        fault: FaultPolicy | None,
    ) -> None:
        check_sizes(max_size, ttl_seconds)
        if not math.isfinite(ttl_seconds):
            raise ValidationError("ttl_seconds", f"must be finite, got {ttl_seconds!r}")
        self.max_size = max_size
        self.ttl_seconds = ttl_seconds
        self.keys = NamespaceKeys.of(namespace)
        self.fault = fault if fault is not None else FaultPolicy(retry_interval)
        self._owns_client = False
        # Redis rounds nothing: a TTL below 1 ms would be refused, so it becomes 1 ms.
        self.ttl_ms = max(1, math.ceil(ttl_seconds * 1000))
        self.prefix = encode_text(self.keys.cache_entry_prefix)
        self._lru = self.keys.cache_lru.encode()
        self._ttl = self.keys.cache_ttl.encode()
        self._counters = self.keys.cache_stats.encode()
        self._last_counts: tuple[int, int, int] = (0, 0, 0)

    def entry_keys(self, member: bytes) -> tuple[bytes, bytes, bytes, bytes]:
        """KEYS of the get, put and reject scripts for the cache key ``member``."""
        return (self.prefix + member, self._lru, self._ttl, self._counters)

    def get_ops(self, key: str) -> Ops[str | None]:
        member = encode_text(key)
        raw = yield Call("cache get", "cache_get.lua", self.entry_keys(member), (member, MAGIC))
        return (yield from self.decode_hit(raw, member))

    def decode_hit(self, raw: object, member: bytes) -> Ops[str | None]:
        """The text of a get's reply: ``None`` for a miss, a fault, or a value that is not
        UTF-8 (that one is dropped and re-counted as a miss: a second, rare round trip)."""
        if not isinstance(raw, bytes):
            return None
        # The script checked the magic; the value is returned with it to save a copy there.
        try:
            return raw[_MAGIC_LENGTH:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            yield Call("cache get", "cache_reject.lua", self.entry_keys(member), (member,))
            return None

    def value(self, context: str) -> bytes:
        """What a put stores for ``context``; ``ValidationError`` unless it is a ``str``."""
        if not isinstance(context, str):
            raise ValidationError("context", f"must be str, got {type(context).__name__}")
        return MAGIC + encode_text(context)

    def put_args(self, member: bytes, value: bytes) -> tuple[bytes | int, ...]:
        """ARGV of the put script (and the cache part of ``run_write.lua``)."""
        return (member, value, self.ttl_ms, self.max_size, self.prefix)

    def put_ops(self, key: str, context: str) -> Ops[None]:
        member, value = encode_text(key), self.value(context)
        keys = self.entry_keys(member)
        yield Call("cache put", "cache_put.lua", keys, self.put_args(member, value))

    def clear_ops(self) -> Ops[None]:
        yield Call("cache clear", "cache_clear.lua", (self._lru, self._ttl), (self.prefix,))

    def stats_ops(self) -> Ops[dict[str, Any]]:
        reply = yield Call(
            "cache stats", "cache_stats.lua", (self._lru, self._ttl, self._counters), (self.prefix,)
        )
        if reply is not FAILED:
            size, hits, misses = cast("list[int]", reply)
            self._last_counts = (int(size), int(hits), int(misses))
        size, hits, misses = self._last_counts
        return {
            "size": size,
            "max_size": self.max_size,
            "hits": hits,
            "misses": misses,
            "hit_rate": format_hit_rate(hits, misses),
            "ttl_sec": self.ttl_seconds,
            "errors": self.fault.errors,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(namespace={self.keys.namespace!r}, "
            f"max_size={self.max_size}, ttl_seconds={self.ttl_seconds})"
        )


class RedisContextCache(_CacheOps, ContextCache, Closeable):
    """LRU + TTL cache of context strings in Redis, shared by a namespace. Thread-safe.

    ``client`` is a ``redis.Redis`` (or fakeredis) or ``redis.cluster.RedisCluster``; it
    should have short timeouts and few retries (``client_from_url`` gives both), since a
    failing call blocks the caller for as long as the client insists. It may decode
    responses or not. ``fault`` lets a cache and windows on one client share one fault policy;
    otherwise the cache gets its own, with ``retry_interval`` seconds of cool-down.
    Bad ``max_size`` / ``ttl_seconds`` raise ``ValidationError``; a bad namespace raises
    ``ConfigurationError``. Constructing does no network I/O.
    """

    def __init__(
        self,
        client: RedisClient,
        namespace: str = DEFAULT_NAMESPACE,
        max_size: int = DEFAULT_MAX_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        *,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        fault: FaultPolicy | None = None,
    ) -> None:
        super().__init__(namespace, max_size, ttl_seconds, retry_interval, fault)
        self.client = client
        self.driver = SyncDriver(client, self.fault)

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> RedisContextCache:
        """A cache on a new client for ``url`` (see ``client_from_url``); ``close()`` closes it.

        ``kwargs`` go to the constructor (``namespace``, ``max_size``, ``ttl_seconds``, …),
        ``client_options`` to the client. ``ConfigurationError`` for a bad URL.
        """
        cache = cls(client_from_url(url, **dict(client_options or {})), **kwargs)
        cache._owns_client = True
        return cache

    def get(self, key: str) -> str | None:
        """The live value for ``key`` (now the most recently used), or ``None``.

        ``None`` also when Redis is unreachable, and when the stored value is not one this
        cache wrote or is not UTF-8 (that entry is deleted). Never raises for Redis faults.
        """
        return self.driver.run(self.get_ops(key))

    def put(self, key: str, context: str) -> None:
        """Store ``context`` as the most recently used, fresh entry (see the module doc).

        ``context`` must be a ``str`` (else ``ValidationError`` naming ``context``). Does
        nothing while Redis is unreachable.
        """
        self.driver.run(self.put_ops(key, context))

    def clear(self) -> None:
        """Remove every entry of the namespace; the shared hit and miss counters are kept.

        Does nothing while Redis is unreachable.
        """
        self.driver.run(self.clear_ops())

    def stats(self) -> dict[str, Any]:
        """``size, max_size, hits, misses, hit_rate, ttl_sec`` (namespace-wide) and ``errors``.

        ``size`` counts live entries (reading it forgets expired ones). While Redis is
        unreachable, ``size``/``hits``/``misses`` are the last figures read; ``errors`` is
        this process's count of failed Redis operations.
        """
        return self.driver.run(self.stats_ops())

    def close(self) -> None:
        """Close the client if ``from_url`` made it; a client passed in is the caller's."""
        if self._owns_client:
            self.client.close()


class AsyncRedisContextCache(_CacheOps, AsyncContextCache):
    """``RedisContextCache`` on a ``redis.asyncio`` client: same contract, awaited.

    Shares the namespace's entries, LRU order and counters with every sync or async cache
    of the namespace. Constructing does no network I/O.
    """

    def __init__(
        self,
        client: AsyncRedisClient,
        namespace: str = DEFAULT_NAMESPACE,
        max_size: int = DEFAULT_MAX_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        *,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        fault: FaultPolicy | None = None,
    ) -> None:
        super().__init__(namespace, max_size, ttl_seconds, retry_interval, fault)
        self.client = client
        self.driver = AsyncDriver(client, self.fault)

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AsyncRedisContextCache:
        """A cache on a new asyncio client for ``url``; ``aclose()`` closes it."""
        cache = cls(async_client_from_url(url, **dict(client_options or {})), **kwargs)
        cache._owns_client = True
        return cache

    async def get(self, key: str) -> str | None:
        return await self.driver.run(self.get_ops(key))

    async def put(self, key: str, context: str) -> None:
        await self.driver.run(self.put_ops(key, context))

    async def clear(self) -> None:
        await self.driver.run(self.clear_ops())

    async def stats(self) -> dict[str, Any]:
        return await self.driver.run(self.stats_ops())

    async def aclose(self) -> None:
        """Close the client if ``from_url`` made it; a client passed in is the caller's."""
        if self._owns_client:
            await self.client.aclose()
