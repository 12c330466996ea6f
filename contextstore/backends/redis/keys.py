"""Every Redis key contextstore uses is built here, and only here.

Key schema (``<ns>`` is the namespace; ``{<ns>}`` is a Redis Cluster hash tag):

=====================================  ======  ================================================
key                                    type    holds
=====================================  ======  ================================================
``cs:{<ns>}:cache:e:<key>``            string  one cached context: ``ENTRY_MAGIC`` + UTF-8
                                               text, with Redis's own TTL (``PX``).
                                               ``<key>`` is the cache key as given (``make_key``
                                               gives 32 hex digits).
``cs:{<ns>}:cache:lru``                zset    one member per cached key; score = recency
                                               (a higher score is more recently used), taken
                                               from ``seq``: no clock orders the LRU.
``cs:{<ns>}:cache:ttl``                zset    the same members; score = expiry deadline in
                                               ms on the server's clock (``TIME``, the clock
                                               ``PX`` uses), to find expired entries without
                                               a scan.
``cs:{<ns>}:cache:stats``              hash    ``hits``, ``misses`` (shared counters) and
                                               ``seq`` (the recency sequence, HINCRBY).
``cs:{<ns>}:win``                      hash    the adaptive windows, every number a
                                               little-endian IEEE 754 double (exact):
                                               field ``agg`` = 48 bytes, ``<total> <n>
                                               <resp> <len> <chunks> <fails>`` (records
                                               ever — the count that decides auto-tune —,
                                               samples in the window, their sums), fields
                                               ``0`` … ``99`` = a ring of the last
                                               ``WINDOW`` samples, 32 bytes each,
                                               ``<response_ms> <context_length>
                                               <chunk_count> <failed 0|1>``.
=====================================  ======  ================================================

No key has a TTL except cache entries. Nothing is pickled: every value is text, except the
windows' fixed-size binary doubles.

Why the hash tag: Redis Cluster hashes only the part between the first ``{`` and the next
``}``, so every key of one namespace lives in the same slot, and one Lua script may touch
all of them. The cache's put, stats and clear scripts derive *entry* keys from ``lru``
members inside the script (entry prefix ``..`` member) to delete evicted, expired or cleared
entries; those keys are not declared in ``KEYS``. They start with ``cs:{<ns>}:``, so they
hash to the slot of the declared keys, which Redis Cluster accepts; a server that refused
undeclared keys outright would refuse these scripts. Namespaces may not contain braces, so
the tag is always exactly the namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from contextstore.errors import ConfigurationError

__all__ = ["ENTRY_MAGIC", "PREFIX", "NamespaceKeys", "check_namespace", "key", "namespace_pattern"]

PREFIX = "cs"
# Written before every cached value; a stored value without it was not written by this cache
# (a planted pickle, a foreign tool) and reads as a miss. Versioned so a format change can
# retire old entries the same way.
ENTRY_MAGIC = "cs1:"

_GLOB_SPECIALS = "\\*?[]"


def check_namespace(namespace: str) -> str:
    """Return ``namespace`` if it can be a hash tag; else ``ConfigurationError``.

    Refused: a non-string, the empty string, and anything containing ``{`` or ``}`` (which
    would change which part of the key Redis Cluster hashes).
    """
    if not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace:
        raise ConfigurationError(
            f"namespace: {namespace!r} must be a non-empty string without braces"
        )
    return namespace


def key(namespace: str, *parts: str) -> str:
    """``cs:{<namespace>}:<part>:<part>…``: the one function every key comes from."""
    return ":".join((PREFIX, "{" + check_namespace(namespace) + "}", *parts))


def namespace_pattern(namespace: str) -> str:
    """A SCAN/KEYS glob matching exactly the keys of ``namespace`` (glob characters escaped)."""
    escaped = "".join("\\" + c if c in _GLOB_SPECIALS else c for c in check_namespace(namespace))
    return f"{PREFIX}:\\{{{escaped}\\}}:*"


@dataclass(frozen=True, slots=True)
class NamespaceKeys:
    """The keys of one namespace, built once per cache or windows object."""

    namespace: str
    cache_lru: str
    cache_ttl: str
    cache_stats: str
    cache_entry_prefix: str
    windows: str

    @classmethod
    def of(cls, namespace: str) -> NamespaceKeys:
        """All keys of ``namespace``; ``ConfigurationError`` for an unusable namespace."""
        return cls(
            namespace=check_namespace(namespace),
            cache_lru=key(namespace, "cache", "lru"),
            cache_ttl=key(namespace, "cache", "ttl"),
            cache_stats=key(namespace, "cache", "stats"),
            cache_entry_prefix=key(namespace, "cache", "e", ""),
            windows=key(namespace, "win"),
        )

    def cache_entry(self, cache_key: str) -> str:
        """The string key holding the value cached under ``cache_key``."""
        return self.cache_entry_prefix + cache_key
