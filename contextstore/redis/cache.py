"""The context cache in Redis, shared by every process of a namespace (SPEC §2.1, §6).

Same contract as ``MemoryContextCache`` (see ``contextstore.cache.base``), with these
Redis-specific facts:

- Entries live in ``cs:{ns}:cache:e:<key>`` with Redis's own TTL (``PX``): an entry older
  than ``ttl_seconds`` is gone on the server's clock, whichever process wrote it. Recency is a
  zset scored from a per-namespace sequence, so the LRU order is fleet-wide and no client
  clock is involved; a second zset of deadlines (server clock) lets a put into a full cache
  find expired entries without a scan. Hits and misses are counted in one shared hash.
- ``get``, ``put``, ``stats`` and ``clear`` are each one Lua script, one round trip, atomic
  (scripts in ``contextstore/lua/cache_*.lua``, keys in ``contextstore.redis.keys``).
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
from typing import Any

from contextstore.cache.base import (
    DEFAULT_MAX_SIZE,
    DEFAULT_TTL_SECONDS,
    ContextCache,
    check_sizes,
    format_hit_rate,
)
from contextstore.config import DEFAULT_NAMESPACE
from contextstore.errors import ValidationError
from contextstore.redis.client import (
    DEFAULT_RETRY_INTERVAL,
    FaultPolicy,
    LuaScript,
    RedisClient,
    client_from_url,
)
from contextstore.redis.keys import ENTRY_MAGIC, NamespaceKeys
from contextstore.resources import Closeable

__all__ = ["RedisContextCache"]

_MAGIC = ENTRY_MAGIC.encode("ascii")
_MAGIC_LENGTH = len(ENTRY_MAGIC)


def _none() -> None:
    return None


def _encode(text: str) -> bytes:
    # surrogatepass: any Python str round-trips, as it does in the memory cache.
    return text.encode("utf-8", "surrogatepass")


class RedisContextCache(ContextCache, Closeable):
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
        check_sizes(max_size, ttl_seconds)
        if not math.isfinite(ttl_seconds):
            raise ValidationError("ttl_seconds", f"must be finite, got {ttl_seconds!r}")
        self.max_size = max_size
        self.ttl_seconds = ttl_seconds
        self.client = client
        self.keys = NamespaceKeys.of(namespace)
        self.fault = fault if fault is not None else FaultPolicy(retry_interval)
        self._owns_client = False
        # Redis rounds nothing: a TTL below 1 ms would be refused, so it becomes 1 ms.
        self._ttl_ms = max(1, math.ceil(ttl_seconds * 1000))
        self._prefix = _encode(self.keys.cache_entry_prefix)
        # Encoded once: redis-py would otherwise encode every key on every call.
        self._lru = self.keys.cache_lru.encode()
        self._ttl = self.keys.cache_ttl.encode()
        self._counters = self.keys.cache_stats.encode()
        self._get = LuaScript(client, "cache_get.lua")
        self._reject = LuaScript(client, "cache_reject.lua")
        self._put = LuaScript(client, "cache_put.lua")
        self._stats = LuaScript(client, "cache_stats.lua")
        self._clear = LuaScript(client, "cache_clear.lua")
        self._last_counts: tuple[int, int, int] = (0, 0, 0)

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
        member = _encode(key)
        entry = self._prefix + member

        def run() -> bytes | str | None:
            try:
                result: bytes | str | None = self._get(
                    keys=[entry, self._lru, self._ttl, self._counters], args=[member, _MAGIC]
                )
            except UnicodeDecodeError:
                # A decode_responses client could not decode a forged value: same as below.
                return _MAGIC + b"\xff"
            return result

        raw = self.fault.call(run, _none, "cache get")
        if raw is None:
            return None
        # The script checked the magic; the value is returned with it to save a copy there.
        if isinstance(raw, str):
            return raw[_MAGIC_LENGTH:]
        try:
            return raw[_MAGIC_LENGTH:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            self.fault.call(
                lambda: self._reject(
                    keys=[entry, self._lru, self._ttl, self._counters], args=[member]
                ),
                _none,
                "cache get",
            )
            return None

    def put(self, key: str, context: str) -> None:
        """Store ``context`` as the most recently used, fresh entry (see the module doc).

        ``context`` must be a ``str`` (else ``ValidationError`` naming ``context``). Does
        nothing while Redis is unreachable.
        """
        if not isinstance(context, str):
            raise ValidationError("context", f"must be str, got {type(context).__name__}")
        member = _encode(key)
        value = _MAGIC + _encode(context)
        self.fault.call(
            lambda: self._put(
                keys=[self._prefix + member, self._lru, self._ttl, self._counters],
                args=[member, value, self._ttl_ms, self.max_size, self._prefix],
            ),
            _none,
            "cache put",
        )

    def clear(self) -> None:
        """Remove every entry of the namespace; the shared hit and miss counters are kept.

        Does nothing while Redis is unreachable.
        """
        self.fault.call(
            lambda: self._clear(keys=[self._lru, self._ttl], args=[self._prefix]),
            _none,
            "cache clear",
        )

    @property
    def stats(self) -> dict[str, Any]:
        """``size, max_size, hits, misses, hit_rate, ttl_sec`` (namespace-wide) and ``errors``.

        ``size`` counts live entries (reading it forgets expired ones). While Redis is
        unreachable, ``size``/``hits``/``misses`` are the last figures read; ``errors`` is
        this process's count of failed Redis operations.
        """

        def run() -> tuple[int, int, int]:
            size, hits, misses = self._stats(
                keys=[self._lru, self._ttl, self._counters], args=[self._prefix]
            )
            self._last_counts = (int(size), int(hits), int(misses))
            return self._last_counts

        size, hits, misses = self.fault.call(run, lambda: self._last_counts, "cache stats")
        return {
            "size": size,
            "max_size": self.max_size,
            "hits": hits,
            "misses": misses,
            "hit_rate": format_hit_rate(hits, misses),
            "ttl_sec": self.ttl_seconds,
            "errors": self.fault.errors,
        }

    def close(self) -> None:
        """Close the client if ``from_url`` made it; a client passed in is the caller's."""
        if self._owns_client:
            self.client.close()

    def __repr__(self) -> str:
        return (
            f"RedisContextCache(namespace={self.keys.namespace!r}, max_size={self.max_size}, "
            f"ttl_seconds={self.ttl_seconds})"
        )
