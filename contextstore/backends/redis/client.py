"""Redis clients from URLs, and the fault policy every Redis-backed part follows
(docs/design/failures.md).

``client_from_url`` builds a redis-py client with short timeouts, so an unreachable server
costs a fleet process at most about a second, not the minutes of an OS default.

``FaultPolicy`` is how the cache and the windows survive Redis outages: an operation that
fails with a Redis or socket error is counted, logged (one WARNING per retry interval at
most) and answered by the caller's fallback; for the rest of the interval Redis is not tried
at all (no connect timeouts piling up); the first operation after it tries again, and the
first success ends the outage. Nothing is rebuilt, so sharing resumes by itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from contextstore.backends.urls import mask_url
from contextstore.errors import BackendUnavailableError, ConfigurationError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RETRY_INTERVAL",
    "DEFAULT_SOCKET_TIMEOUT",
    "REDIS_FAULTS",
    "AsyncRedisClient",
    "FaultPolicy",
    "RedisClient",
    "async_client_from_url",
    "client_from_url",
    "hide_password",
]

RedisClient: TypeAlias = redis.Redis | RedisCluster
AsyncRedisClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster"

DEFAULT_CONNECT_TIMEOUT = 0.5
"""Seconds to wait for a TCP connection to Redis before treating it as unreachable."""
DEFAULT_SOCKET_TIMEOUT = 1.0
"""Seconds to wait for one reply from Redis before treating it as unreachable."""
DEFAULT_RETRY_INTERVAL = 1.0
"""Seconds after a failure during which Redis is not tried again (and no WARNING repeats)."""
DEFAULT_ASYNC_CONNECTIONS = 64
"""Connections an asyncio client opens at most; further concurrent calls wait for one (up
to the socket timeout) instead of failing, so a burst of runs cannot exhaust Redis."""
DEFAULT_ASYNC_CLUSTER_CONNECTIONS = 1024
"""Per node, for an asyncio cluster client, which cannot wait for a free connection: high
enough that a burst of concurrent runs never meets the limit."""

# Everything redis-py raises for a server that is down, slow, failing over or refusing work.
# ``RedisClusterException`` is not a ``RedisError`` (e.g. no node reachable at all); OSError
# covers socket errors a custom connection class might let through.
REDIS_FAULTS: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)

_SCHEMES = {
    "redis": (False, False),
    "rediss": (False, True),
    "unix": (False, False),
    "redis+cluster": (True, False),
    "rediss+cluster": (True, True),
}

T = TypeVar("T")

logger = logging.getLogger("contextstore.backends.redis")


def hide_password(url: str) -> str:
    """``url`` with any password (user info or query parameter) replaced by ``***``."""
    return mask_url(url)


def client_from_url(url: str, **options: Any) -> RedisClient:
    """A redis-py client for ``url``; ``options`` go to the client and win over our defaults.

    Schemes: ``redis://`` and ``rediss://`` (TLS) give a ``redis.Redis``; ``unix://path``
    a Unix-socket ``redis.Redis``; ``redis+cluster://host:port`` and
    ``rediss+cluster://host:port`` (more seed nodes may follow, comma-separated:
    ``redis+cluster://h1:7000,h2:7000``) a ``redis.cluster.RedisCluster``. User name and
    password may be given in the URL (``redis://:secret@host``, percent-encoded); the path
    may name a database (``/2``; a cluster has only database 0).

    Defaults: 0.5 s connect timeout, 1 s socket timeout, one immediate retry (which replaces
    a pooled connection a restarted server has closed). A plain client connects lazily, so
    this never touches the network; a cluster client must discover the cluster now, and
    raises ``BackendUnavailableError`` when no seed node answers.

    Raises ``ConfigurationError`` (naming the URL, password hidden) for an unknown scheme, a
    missing host, a bad port, database or query option.
    """
    plan = _plan(url)
    if plan.nodes is None:
        settings = {**plan.settings, "retry": Retry(NoBackoff(), 1), **options}
        try:
            return redis.Redis.from_url(url, **settings)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"redis URL {plan.shown}: {exc}") from exc
    settings = {**plan.settings, "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 2)}
    settings.update(options)
    nodes = [ClusterNode(host, port) for host, port in plan.nodes]  # type: ignore[no-untyped-call]
    try:
        return RedisCluster(startup_nodes=nodes, **settings)
    except (RedisError, RedisClusterException, OSError) as exc:
        raise BackendUnavailableError(f"redis cluster {plan.shown} is unreachable: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"redis URL {plan.shown}: {exc}") from exc


def async_client_from_url(url: str, **options: Any) -> AsyncRedisClient:
    """The ``redis.asyncio`` twin of ``client_from_url``: same URLs, defaults and errors.

    One difference: an asyncio cluster client discovers the cluster on its first command,
    not here, so an unreachable cluster is a Redis fault of that command (the fault policy
    answers it) rather than a ``BackendUnavailableError`` now. Nothing here does I/O.
    """
    from redis.asyncio import BlockingConnectionPool
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.asyncio.retry import Retry as AsyncRetry

    plan = _plan(url)
    try:
        if plan.nodes is None:
            settings = {
                **plan.settings,
                "retry": AsyncRetry(NoBackoff(), 1),
                "max_connections": DEFAULT_ASYNC_CONNECTIONS,
                "timeout": DEFAULT_SOCKET_TIMEOUT,  # waiting for a free connection
                **options,
            }
            pool = BlockingConnectionPool.from_url(url, **settings)
            return AsyncRedis.from_pool(pool)  # the client owns (and closes) its pool
        settings = {
            **plan.settings,
            "retry": AsyncRetry(ExponentialBackoff(cap=0.1, base=0.01), 2),
            "max_connections": DEFAULT_ASYNC_CLUSTER_CONNECTIONS,
        }
        settings.update(options)
        nodes = [AsyncClusterNode(host, port) for host, port in plan.nodes]
        return AsyncRedisCluster(startup_nodes=nodes, **settings)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"redis URL {plan.shown}: {exc}") from exc


@dataclass(frozen=True)
class _Plan:
    """What a URL asks for: ``nodes`` (host, port) for a cluster, else ``None``; ``settings``
    are client keyword arguments (timeouts; for a cluster also credentials and TLS)."""

    shown: str
    nodes: list[tuple[str, int]] | None
    settings: dict[str, Any]


def _plan(url: str) -> _Plan:
    """Check ``url`` and say how to build a client for it (no I/O)."""
    shown = hide_password(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"redis URL {shown}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        known = ", ".join(f"{s}://" for s in _SCHEMES)
        raise ConfigurationError(f"redis URL {shown}: unknown scheme {parts.scheme!r}; use {known}")
    cluster, tls = _SCHEMES[scheme]
    settings: dict[str, Any] = {
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
    }
    if not cluster:
        if scheme != "unix":
            _check_host_and_port(parts, shown)
        _check_database(parts, shown, cluster=False)
        return _Plan(shown, None, settings)
    return _cluster_plan(parts, tls, shown, settings)


def _cluster_plan(parts: SplitResult, tls: bool, shown: str, settings: dict[str, Any]) -> _Plan:
    """Seed nodes from the comma-separated host list; everything else as redis-py parses it."""
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    connection: dict[str, Any] = {}
    for host in hosts.split(","):
        netloc = f"{userinfo}@{host}" if userinfo else host
        single = parts._replace(scheme="rediss" if tls else "redis", netloc=netloc)
        _check_host_and_port(single, shown)
        _check_database(single, shown, cluster=True)
        try:
            connection = parse_url(urlunsplit(single))  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ConfigurationError(f"redis URL {shown}: {exc}") from exc
        nodes.append((connection.pop("host"), connection.pop("port", 6379)))
    connection.pop("db", None)
    if connection.pop("connection_class", None) is not None:
        connection["ssl"] = True
    settings.update(connection)
    return _Plan(shown, nodes, settings)


def _check_host_and_port(parts: SplitResult, shown: str) -> None:
    try:
        port = parts.port
    except ValueError as exc:
        # Not the parser's words: they quote the port as it read it, which may be part of a
        # password holding a "/" (``redis://u:pa/ss@h``).
        raise ConfigurationError(f"redis URL {shown}: bad port (not a number up to 65535)") from exc
    if not parts.hostname:
        raise ConfigurationError(f"redis URL {shown}: no host")
    if port == 0:
        raise ConfigurationError(f"redis URL {shown}: bad port 0")


def _check_database(parts: SplitResult, shown: str, *, cluster: bool) -> None:
    """redis-py silently ignores a path that is not a number; we refuse it."""
    if parts.scheme == "unix":
        return
    path = parts.path.strip("/")
    if not path:
        return
    if not path.isdigit():
        raise ConfigurationError(f"redis URL {shown}: database {path!r} is not a number")
    if cluster and int(path) != 0:
        raise ConfigurationError(f"redis URL {shown}: a cluster has only database 0")


class FaultPolicy:
    """Counts Redis failures, rate-limits their WARNINGs, and pauses Redis after each one.

    ``call(operation, fallback)`` runs ``operation``; if it raises one of ``REDIS_FAULTS`` the
    error is counted, a WARNING is logged unless one was logged less than ``retry_interval``
    seconds ago, and ``fallback()`` answers instead. Until ``retry_interval`` seconds after the
    failure, ``call`` skips ``operation`` and answers with ``fallback()`` at once; the first
    call after that tries Redis again. The first success after a failure logs one INFO line.
    Exceptions that are not Redis faults (a bug, a bad argument) propagate.

    One policy may be shared by several parts (a cache and windows on the same client) so they
    share one cool-down, one WARNING stream and one ``errors`` count. Thread-safe.
    ``clock`` returns seconds and must not go backwards (``time.monotonic`` by default).
    """

    def __init__(
        self,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger = logger,
    ) -> None:
        if isinstance(retry_interval, bool) or not isinstance(retry_interval, int | float):
            raise ConfigurationError(f"retry_interval: must be a number, got {retry_interval!r}")
        if not retry_interval >= 0:
            raise ConfigurationError(f"retry_interval: must be ≥ 0 seconds, got {retry_interval!r}")
        self.retry_interval = float(retry_interval)
        self._clock = clock
        self._log = log
        self._lock = threading.Lock()
        self._errors = 0
        self._down = False
        self._probing = False  # an acall probe is in flight (asyncio: one loop, no lock)
        self._retry_at = 0.0
        self._next_warning_at = 0.0

    @property
    def errors(self) -> int:
        """How many Redis operations have failed (skipped operations are not counted)."""
        return self._errors

    @property
    def down(self) -> bool:
        """True from a failure until the next success."""
        return self._down

    def call(self, operation: Callable[[], T], fallback: Callable[[], T], what: str) -> T:
        """``operation()``, or ``fallback()`` while Redis is failing (see the class doc)."""
        if self._down and self._clock() < self._retry_at:
            return fallback()
        try:
            result = operation()
        except REDIS_FAULTS as exc:
            self._failed(exc, what)
            return fallback()
        if self._down:
            self._recovered()
        return result

    async def acall(
        self, operation: Callable[[], Awaitable[T]], fallback: Callable[[], T], what: str
    ) -> T:
        """``await operation()``, or ``fallback()`` while Redis is failing: ``call``'s rules,
        for many operations in flight at once on one event loop.

        After a failure, the first operation past the retry interval is the one probe: the
        others answer with ``fallback()`` while it is in flight, so a hung server costs one
        socket timeout per interval, not one per concurrent run.
        """
        probe = False
        if self._down:
            if self._clock() < self._retry_at or self._probing:
                return fallback()
            self._probing = probe = True
        try:
            result = await operation()
        except REDIS_FAULTS as exc:
            self._failed(exc, what)
            return fallback()
        finally:
            if probe:
                self._probing = False
        if self._down:
            self._recovered()
        return result

    def _failed(self, exc: BaseException, what: str) -> None:
        now = self._clock()
        with self._lock:
            self._errors += 1
            self._down = True
            self._retry_at = now + self.retry_interval
            warn = now >= self._next_warning_at
            if warn:
                self._next_warning_at = now + self.retry_interval
            errors = self._errors
        if warn:
            self._log.warning(
                "Redis %s failed (%s: %s); the cache answers misses and the adaptive windows "
                "use process-local memory until Redis answers again; retrying every %.3g s "
                "(%d errors so far)",
                what,
                type(exc).__name__,
                exc,
                self.retry_interval,
                errors,
            )

    def _recovered(self) -> None:
        with self._lock:
            if not self._down:
                return
            self._down = False
            # _next_warning_at is kept: a flapping server still gets one WARNING per interval.
            errors = self._errors
        self._log.info("Redis answers again; sharing resumed (%d errors so far)", errors)
