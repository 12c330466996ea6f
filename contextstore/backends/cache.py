"""The context cache interface: one contract, written here, for memory and Redis alike.

Contract (docs/design/cache-and-windows.md):
- ``get(key)`` returns the cached text or ``None``; a hit refreshes the entry's recency.
- ``put(key, context)`` stores text; on an existing key it refreshes value, age and recency.
- An entry whose age exceeds ``ttl_seconds`` is expired and never returned again.
- A put into a full cache drops expired entries first, then evicts the least recently used;
  the number of entries never exceeds ``max_size``.
- ``stats()`` → ``size, max_size, hits, misses, hit_rate, ttl_sec`` (``hit_rate`` is a string:
  ``"0%"`` before any get, else one decimal, ``"42.0%"``). Backends may add keys (``errors``).
  A method on both flavours (``cache.stats()``, ``await cache.stats()``): reading it may
  cost a round trip.
- ``clear()`` removes every entry and keeps the hit and miss counters.
- Values are text. Nothing is ever pickled.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

DEFAULT_MAX_SIZE = 256
DEFAULT_TTL_SECONDS = 300.0


def make_key(query: str, filters: Mapping[str, Any] | None = None) -> str:
    """MD5 hex of the lowercased, stripped query plus ``str(sorted(filters.items()))``.

    MD5 is a digest for lookup here, not a security measure. Empty or ``None`` filters add
    nothing, so ``make_key(q)`` equals ``make_key(q, {})``.
    """
    material = query.strip().lower()
    if filters:
        material += str(sorted(filters.items()))
    return hashlib.md5(material.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def format_hit_rate(hits: int, misses: int) -> str:
    """``"0%"`` before any request, else the percentage with one decimal (``"42.0%"``)."""
    total = hits + misses
    return "0%" if total == 0 else f"{100.0 * hits / total:.1f}%"


class ContextCache(ABC):
    """LRU + TTL cache of composed contexts, keyed by ``make_key``."""

    max_size: int
    ttl_seconds: float

    @abstractmethod
    def get(self, key: str) -> str | None:
        """The live entry for ``key`` (refreshing its recency), or ``None`` (a miss)."""

    @abstractmethod
    def put(self, key: str, context: str) -> None:
        """Store ``context`` under ``key``, evicting as the contract says."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every entry; the hit and miss counters are kept."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """``size, max_size, hits, misses, hit_rate, ttl_sec`` (and backend extras)."""

    def make_key(self, query: str, filters: Mapping[str, Any] | None = None) -> str:
        return make_key(query, filters)


class AsyncContextCache(ABC):
    """The same contract as ``ContextCache``, for an event loop: every call is awaited."""

    max_size: int
    ttl_seconds: float

    @abstractmethod
    async def get(self, key: str) -> str | None:
        """The live entry for ``key`` (refreshing its recency), or ``None`` (a miss)."""

    @abstractmethod
    async def put(self, key: str, context: str) -> None:
        """Store ``context`` under ``key``, evicting as the contract says."""

    @abstractmethod
    async def clear(self) -> None:
        """Remove every entry; the hit and miss counters are kept."""

    @abstractmethod
    async def stats(self) -> dict[str, Any]:
        """``size, max_size, hits, misses, hit_rate, ttl_sec`` (and backend extras)."""

    async def aclose(self) -> None:  # noqa: B027  (optional: most caches hold nothing)
        """Release what the cache holds (nothing, unless it made its own client)."""

    def make_key(self, query: str, filters: Mapping[str, Any] | None = None) -> str:
        return make_key(query, filters)


def check_sizes(max_size: int, ttl_seconds: float) -> None:
    """Refuse sizes no cache can honour, naming the field."""
    from contextstore.errors import ValidationError

    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
        raise ValidationError("max_size", f"must be an integer ≥ 1, got {max_size!r}")
    if (
        isinstance(ttl_seconds, bool)
        or not isinstance(ttl_seconds, int | float)
        or not 0 < ttl_seconds < math.inf
    ):
        raise ValidationError("ttl_seconds", f"must be a finite number > 0, got {ttl_seconds!r}")
