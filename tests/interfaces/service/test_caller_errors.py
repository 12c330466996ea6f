"""The caller's mistakes over HTTP are 422 naming the field, never 500 or 503.

A NUL in a path, a query parameter or a ``/v1/match`` scope; an integer wider than a BIGINT;
a thousand filter keys; a scope past the bounds ``/v1/run`` applies; a JSON line longer
than the bound. Each through a real server on SQLite and on PostgreSQL (where a NUL used to
be ``backend_unavailable``), and each writes nothing. 503 stays for a backend really down.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.interfaces.service.server import Server
from tests.interfaces.service.test_api import error

pytestmark = pytest.mark.slow

HUGE = "99999999999999999999"


@pytest.fixture
def owner(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    """An owner key: every route below, lesson writes included, is its to call."""
    with server.client(server.key(fresh_namespace, "owner")) as client:
        added = client.post(
            "/v1/documents", json={"source": "ops/failover.md", "text": "fail over postgres"}
        )
        assert added.status_code == 201, added.text
        yield client


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/v1/lessons/a%00b", "entity_id"),
        ("GET", "/v1/lessons/a%00b/history", "entity_id"),
        ("PATCH", "/v1/lessons/a%00b", "entity_id"),
        ("POST", "/v1/lessons/a%00b/activate", "entity_id"),
        ("POST", "/v1/lessons/a%00b/retire", "entity_id"),
        ("GET", "/v1/lessons?key=tag:%00", "key"),
        ("GET", "/v1/lessons?tag=ops%00", "tag"),
        ("GET", f"/v1/lessons?limit={HUGE}", "limit"),
        ("GET", f"/v1/lessons?offset={HUGE}", "offset"),
        ("GET", "/v1/documents/ops%00.md", "source"),
        ("DELETE", "/v1/documents/ops%00.md", "source"),
        ("GET", "/v1/documents?prefix=%00", "prefix"),
        ("GET", f"/v1/documents?limit={HUGE}", "limit"),
        ("GET", f"/v1/documents?offset={HUGE}", "offset"),
        ("GET", "/v1/metrics/report?worker_prefix=%00", "worker_prefix"),
    ],
)
def test_a_nul_or_a_huge_integer_in_a_path_or_query_is_422(
    owner: httpx.Client, method: str, path: str, field: str
) -> None:
    body = {"summary": "s"} if method == "PATCH" else None
    response = owner.request(method, path, json=body)
    error(422, "invalid", field, response)
    assert [document["source"] for document in owner.get("/v1/documents").json()] == [
        "ops/failover.md"
    ]


TOO_MANY_TAGS = [f"t{i}" for i in range(65)]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/match", {"scope": {"tags": ["ops\u0000"]}}, "scope.tags"),
        ("/v1/match", {"scope": {"entity_ids": ["a.\u0000"]}}, "scope.entity_ids"),
        ("/v1/match", {"scope": {"tags": TOO_MANY_TAGS}}, "scope.tags"),
        ("/v1/match", {"scope": {"tags": TOO_MANY_TAGS}, "explain": True}, "scope.tags"),
        ("/v1/run", {"query": "fail over", "scope": {"tags": TOO_MANY_TAGS}}, "scope.tags"),
        ("/v1/search", {"query": "postgres", "filters": {"n": 10**30}}, "filters"),
        ("/v1/search", {"query": "postgres", "top_k": 10**20}, "top_k"),
        ("/v1/run", {"query": "postgres", "filters": {f"k{i}": 1 for i in range(1000)}}, "filters"),
        (
            "/v1/search",
            {"query": "postgres", "filters": {f"k{i}": 1 for i in range(1000)}},
            "filters",
        ),
        ("/v1/documents", {"source": "a\u0000.md", "text": "x"}, "source"),
    ],
)
def test_bodies_past_the_bounds_are_422(
    owner: httpx.Client, path: str, body: dict[str, object], field: str
) -> None:
    error(422, "invalid", field, owner.post(path, json=body))
    report = owner.get("/v1/metrics/report")
    assert report.status_code == 200 and report.json()["runs"] == 0  # no run was recorded


def test_match_applies_the_scope_bounds_of_run(owner: httpx.Client) -> None:
    at_bounds = {"tags": [f"t{i}" for i in range(64)], "entity_ids": ["a.b"] * 64}
    assert owner.post("/v1/match", json={"scope": at_bounds}).status_code == 200
    assert owner.post("/v1/run", json={"query": "q", "scope": at_bounds}).status_code == 200
    over = {"tags": ["x" * 256]}
    error(422, "invalid", "scope.tags", owner.post("/v1/match", json={"scope": over}))
