"""Redis-specific tests: round trips, planted values, outages, fleets, URLs, keys.

Helpers shared by these modules live here. Clients come from ``make_client``:
``fakeredis`` (always; needs ``lupa`` for Lua), ``redis`` (the shared server named by
``CONTEXTSTORE_TEST_REDIS_URL``; tests use their own namespaces and delete their keys).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
import redis

from contextstore.backends.redis.keys import NamespaceKeys, namespace_pattern


def make_client(request: pytest.FixtureRequest, backend: str, **options: Any) -> Any:
    """A client for ``backend``: ``fakeredis`` or ``redis`` (skips/fails as the fixtures do)."""
    if backend == "fakeredis":
        pytest.importorskip("lupa", reason="fakeredis runs Lua scripts only with lupa")
        import fakeredis

        return fakeredis.FakeStrictRedis(server=fakeredis.FakeServer(), **options)
    url = request.getfixturevalue("redis_url")
    return redis.Redis.from_url(url, **options)


def drop_namespace(client: Any, namespace: str) -> None:
    """Delete every key of ``namespace`` (and only those)."""
    for key in client.scan_iter(match=namespace_pattern(namespace), count=500):
        client.delete(key)


def namespace_keys(client: Any, namespace: str) -> set[str]:
    """The names of every key of ``namespace``, as text."""
    return {
        key.decode() if isinstance(key, bytes) else key
        for key in client.scan_iter(match=namespace_pattern(namespace), count=500)
    }


def shared_total(client: Any, namespace: str) -> int | None:
    """The fleet-wide record total as stored in Redis (``None`` before any record)."""
    agg = client.hget(NamespaceKeys.of(namespace).windows, "agg")
    return None if agg is None else int(struct.unpack_from("<d", agg)[0])


class CountingConnection(redis.Connection):
    """A connection that counts the requests it sends (a pipeline is one request)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)
