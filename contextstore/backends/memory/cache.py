"""In-process LRU + TTL context cache (docs/design/cache-and-windows.md), the default when no Redis
URL is set.

Layout: one ``OrderedDict`` in recency order (least recently used first) mapping each key to a
``(deadline, value)`` tuple, where ``deadline = put time + ttl_seconds`` on the injected clock.
No per-entry wrapper object and no second index: a get is one dict lookup, one comparison and
one ``move_to_end``. Storing the deadline rather than the put time saves a subtraction per get
and makes "age exactly ``ttl_seconds``" compare exactly on a fake clock.

Expired entries can sit anywhere in recency order (a get refreshes recency, not age), so
finding them takes a scan. ``_earliest`` is a lower bound on every stored deadline; while the
clock has not passed it nothing can be expired and the scan is skipped, so a full cache whose
entries are all live evicts in O(1).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from contextstore.backends.cache import (
    DEFAULT_MAX_SIZE,
    DEFAULT_TTL_SECONDS,
    AsyncContextCache,
    ContextCache,
    check_sizes,
    format_hit_rate,
)
from contextstore.errors import ValidationError

__all__ = ["AsyncMemoryContextCache", "MemoryContextCache"]


class MemoryContextCache(ContextCache):
    """Thread-safe LRU + TTL cache of context strings, private to this process.

    - ``get(key)``: the value, or ``None`` when absent or expired. An entry is expired when
      its age (``clock()`` minus its last put) is strictly greater than ``ttl_seconds``; an
      age of exactly ``ttl_seconds`` is still live. An expired entry found by a get is
      removed and the get counts as a miss. A hit makes the entry the most recently used.
    - ``put(key, context)``: stores ``context`` (which must be a ``str``, else
      ``ValidationError`` naming ``context``; nothing is stored). A put on an existing key,
      live or expired, replaces its value and resets its age and recency. A put of a new key
      into a full cache first drops every expired entry and evicts the least recently used
      live entry only if the cache is still full. The entry count never exceeds ``max_size``.
    - ``stats``: exactly ``size, max_size, hits, misses, hit_rate, ttl_sec``. ``size`` counts
      live entries only: reading stats drops expired entries (without counting misses).
    - ``clear()``: removes every entry; hits and misses are kept.

    ``clock`` returns seconds and must never go backwards (``time.monotonic`` by default).
    Bad ``max_size`` / ``ttl_seconds`` raise ``ValidationError`` naming the field.
    """

    __slots__ = (
        "_clock",
        "_data",
        "_earliest",
        "_hits",
        "_lock",
        "_misses",
        "max_size",
        "ttl_seconds",
    )

    def __init__(
        self,
        max_size: int = DEFAULT_MAX_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_sizes(max_size, ttl_seconds)
        if not callable(clock):
            raise ValidationError("clock", f"must be callable, got {clock!r}")
        self.max_size = max_size
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._earliest = math.inf  # lower bound on every stored deadline
        self._hits = 0
        self._misses = 0
        # A plain Lock: no method calls another while holding it, and it is cheaper than RLock.
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The live value for ``key`` (now the most recently used), or ``None`` (a miss)."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self._misses += 1
                return None
            if self._clock() > entry[0]:
                del self._data[key]
                self._misses += 1
                return None
            self._data.move_to_end(key)
            self._hits += 1
            return entry[1]

    def put(self, key: str, context: str) -> None:
        """Store ``context`` under ``key`` as the most recently used, fresh entry."""
        if not isinstance(context, str):
            raise ValidationError("context", f"must be str, got {type(context).__name__}")
        with self._lock:
            data = self._data
            deadline = self._clock() + self.ttl_seconds
            if key in data:
                data.move_to_end(key)
            elif len(data) >= self.max_size:
                self._drop_expired()
                if len(data) >= self.max_size:
                    data.popitem(last=False)
            data[key] = (deadline, context)
            if deadline < self._earliest:
                self._earliest = deadline

    def clear(self) -> None:
        """Remove every entry; the hit and miss counters are kept."""
        with self._lock:
            self._data.clear()
            self._earliest = math.inf

    def stats(self) -> dict[str, Any]:
        """``size`` (live entries), ``max_size``, ``hits``, ``misses``, ``hit_rate``, ``ttl_sec``.

        Expired entries are dropped first (they are not counted as misses).
        """
        with self._lock:
            self._drop_expired()
            return {
                "size": len(self._data),
                "max_size": self.max_size,
                "hits": self._hits,
                "misses": self._misses,
                "hit_rate": format_hit_rate(self._hits, self._misses),
                "ttl_sec": self.ttl_seconds,
            }

    def _drop_expired(self) -> None:
        """Remove every expired entry. Caller holds the lock."""
        now = self._clock()
        if now <= self._earliest:
            return
        data = self._data
        expired = [key for key, (deadline, _) in data.items() if now > deadline]
        for key in expired:
            del data[key]
        # Exact after a full scan, so the next scan waits until something can really expire.
        self._earliest = min((deadline for deadline, _ in data.values()), default=math.inf)


class AsyncMemoryContextCache(AsyncContextCache):
    """A ``MemoryContextCache`` behind the async interface: in process, so nothing waits.

    ``cache`` is the memory cache it serves (a new one sized by ``max_size`` and
    ``ttl_seconds`` when omitted), so a sync and an async engine may share one.
    """

    __slots__ = ("cache",)

    def __init__(
        self,
        max_size: int = DEFAULT_MAX_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        *,
        cache: MemoryContextCache | None = None,
    ) -> None:
        if cache is None:
            cache = MemoryContextCache(max_size, ttl_seconds, clock)
        self.cache = cache

    @property
    def max_size(self) -> int:  # type: ignore[override]
        return self.cache.max_size

    @property
    def ttl_seconds(self) -> float:  # type: ignore[override]
        return self.cache.ttl_seconds

    async def get(self, key: str) -> str | None:
        return self.cache.get(key)

    async def put(self, key: str, context: str) -> None:
        self.cache.put(key, context)

    async def clear(self) -> None:
        self.cache.clear()

    async def stats(self) -> dict[str, Any]:
        return self.cache.stats()
