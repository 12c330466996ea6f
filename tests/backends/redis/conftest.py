"""Fixtures shared by the Redis-specific test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.backends.redis import drop_namespace, make_client


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    """A fakeredis client, then a real one; the test's namespace is deleted afterwards."""
    client = make_client(request, request.param)
    try:
        yield client
    finally:
        drop_namespace(client, namespace)
        client.close()
