"""Namespaces are tenants over HTTP, and what each role may: a real server, SQLite and
PostgreSQL.

Two namespaces hold different runs. A key's report, lesson statistics, prune and
``/metrics`` scrape show and touch its namespace's rows only; an owner key reaches every
namespace by asking (``all_namespaces``), any other key asking is refused (403). Agents
cannot prune; admins cannot write lessons; owners can do both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contextstore import connect
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.metrics import RunTrace
from tests.factories import make_metric
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

OLD = datetime(1990, 6, 1, tzinfo=UTC)
"""When the second tenant's runs were recorded: older than any other test's rows, so an
owner's prune of every namespace before 1991 deletes exactly these."""


@dataclass
class Tenants:
    """Two namespaces of one server, and a client per key."""

    server: Server
    a: str
    b: str
    marker: str
    clients: dict[str, httpx.Client]

    def rows(self, namespace: str) -> int:
        engine = create_database_engine(self.server.database_url)
        try:
            return MetricsRepository(engine).count(namespace=namespace)
        finally:
            engine.dispose()


@pytest.fixture
def tenants(server: Server, fresh_namespace: str) -> Iterator[Tenants]:
    a, b = fresh_namespace, f"{fresh_namespace}-b"
    marker = f"w{uuid.uuid4().hex[:8]}"
    recent = datetime.now(UTC) - timedelta(hours=1)
    with connect(server.database_url, "", a) as store:
        store.metrics.record_many(
            make_metric(
                recent + timedelta(minutes=i),
                namespace=a,
                worker=f"{marker}-a",
                response_ms=10.0 * (i + 1),
                trace=RunTrace(lessons_included=(f"{marker}.a",)),
            )
            for i in range(3)
        )
    with connect(server.database_url, "", b) as store:
        store.metrics.record_many(
            make_metric(
                OLD + timedelta(minutes=i),
                namespace=b,
                worker=f"{marker}-b",
                response_ms=500.0 + 200 * i,
                trace=RunTrace(lessons_included=(f"{marker}.b",)),
            )
            for i in range(2)
        )
    roles = {
        "agent_a": (a, "agent"),
        "admin_a": (a, "admin"),
        "owner_a": (a, "owner"),
        "agent_b": (b, "agent"),
        "admin_b": (b, "admin"),
    }
    clients = {name: server.client(server.key(ns, role)) for name, (ns, role) in roles.items()}
    try:
        yield Tenants(server, a, b, marker, clients)
    finally:
        for client in clients.values():
            client.close()
        # Nothing stays behind in 1990 for the next test's owner to prune.
        engine = create_database_engine(server.database_url)
        for namespace in (a, b):
            MetricsRepository(engine).prune(datetime.now(UTC) + timedelta(days=1), namespace)
        engine.dispose()


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def forbidden(response: httpx.Response, message: str) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["error"]["type"] == "forbidden"
    assert response.json()["error"]["message"] == message


def test_a_keys_report_and_stats_are_its_namespaces_unless_an_owner_asks(
    tenants: Tenants,
) -> None:
    a, b, c = tenants.a, tenants.b, tenants.clients
    for name in ("agent_a", "admin_a", "owner_a"):
        report = ok(c[name].get("/v1/metrics/report"))
        assert (report["namespace"], report["runs"], report["p50_ms"]) == (a, 3, 20.0), name
    report = ok(c["admin_b"].get("/v1/metrics/report"))
    assert (report["namespace"], report["runs"], report["p50_ms"]) == (b, 2, 600.0)
    stats = ok(c["agent_b"].get("/v1/lessons/stats"))
    assert (stats["namespace"], stats["runs"]) == (b, 2)
    assert [u["entity_id"] for u in stats["lessons"]] == [f"{tenants.marker}.b"]

    every = {"all_namespaces": "true", "worker_prefix": tenants.marker}
    for name in ("agent_a", "admin_a", "admin_b"):
        forbidden(
            c[name].get("/v1/metrics/report", params=every), "all_namespaces needs an owner key"
        )
        forbidden(c[name].get("/v1/lessons/stats", params={"all_namespaces": "true"}),
                  "all_namespaces needs an owner key")  # fmt: skip
    report = ok(c["owner_a"].get("/v1/metrics/report", params=every))
    assert (report["namespace"], report["runs"]) == (None, 5)
    grouped = ok(c["owner_a"].get("/v1/metrics/report", params={**every, "by": "worker"}))
    assert [(g["key"], g["runs"]) for g in grouped["groups"]] == [
        (f"{tenants.marker}-a", 3),
        (f"{tenants.marker}-b", 2),
    ]
    stats = ok(c["owner_a"].get("/v1/lessons/stats", params={"all_namespaces": "true"}))
    named = {u["entity_id"] for u in stats["lessons"]}
    assert {f"{tenants.marker}.a", f"{tenants.marker}.b"} <= named
    assert stats["namespace"] is None


def test_prune_needs_an_admin_and_stays_in_its_namespace(tenants: Tenants) -> None:
    a, b, c = tenants.a, tenants.b, tenants.clients
    everything = {"older_than_seconds": 0}
    forbidden(c["agent_a"].post("/v1/metrics/prune", json=everything), "this needs an admin key")
    forbidden(
        c["admin_a"].post("/v1/metrics/prune", json={**everything, "all_namespaces": True}),
        "all_namespaces needs an owner key",
    )
    for body, field in (
        ({"older_than_seconds": -1}, "older_than_seconds"),
        ({"older_than_seconds": "60"}, "older_than_seconds"),
        ({"older_than_seconds": 10**30}, "older_than_seconds"),
        ({}, "older_than_seconds"),
        ({"older_than_seconds": 0, "namespace": b}, "namespace"),
    ):
        refused = c["admin_a"].post("/v1/metrics/prune", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == field
    assert (tenants.rows(a), tenants.rows(b)) == (3, 2)

    pruned = ok(c["admin_a"].post("/v1/metrics/prune", json=everything))
    assert (pruned["namespace"], pruned["deleted"]) == (a, 3)
    assert (tenants.rows(a), tenants.rows(b)) == (0, 2)
    assert ok(c["admin_b"].get("/v1/metrics/report"))["runs"] == 2

    # An owner prunes every namespace's runs older than 1991: exactly the second tenant's.
    age = datetime.now(UTC) - datetime(1991, 1, 1, tzinfo=UTC)
    body = {"older_than_seconds": int(age.total_seconds()), "all_namespaces": True}
    pruned = ok(c["owner_a"].post("/v1/metrics/prune", json=body))
    assert (pruned["namespace"], pruned["deleted"]) == (None, 2)
    assert tenants.rows(b) == 0


def samples(text: str) -> dict[tuple[str, str | None], float]:
    return {
        (sample.name, sample.labels.get("namespace")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "contextstore_runs_total"
    }


def test_an_admins_scrape_shows_its_namespace_alone_and_an_owners_every_one(
    tenants: Tenants,
) -> None:
    a, b, c = tenants.a, tenants.b, tenants.clients
    for name, runs in (("agent_a", 2), ("agent_b", 1)):
        for _ in range(runs):
            assert c[name].post("/v1/run", json={"query": "tenant question"}).status_code == 200
    forbidden(c["agent_a"].get("/metrics"), "this needs an admin key")
    own = samples(c["admin_a"].get("/metrics").text)
    assert own == {("contextstore_runs_total", a): 2.0}
    assert samples(c["admin_b"].get("/metrics").text) == {("contextstore_runs_total", b): 1.0}
    every = samples(c["owner_a"].get("/metrics").text)
    assert every[("contextstore_runs_total", a)] == 2.0
    assert every[("contextstore_runs_total", b)] == 1.0


def test_lessons_are_written_by_owners_only(tenants: Tenants) -> None:
    c = tenants.clients
    entity = f"{tenants.marker}.lesson"
    body = {"entity_id": entity, "injection_form": "Check the runbook.", "applies_to": ["tag:x"]}
    forbidden(c["admin_a"].post("/v1/lessons", json=body), "this needs an owner key")
    added = c["owner_a"].post("/v1/lessons", json=body)
    assert added.status_code == 201, added.text
    stored = added.json()
    for method, path, payload in (
        ("POST", "/v1/lessons", {**body, "entity_id": f"{entity}.two"}),
        ("PATCH", f"/v1/lessons/{entity}", {"summary": "admin was here"}),
        ("POST", f"/v1/lessons/{entity}/activate", None),
        ("POST", f"/v1/lessons/{entity}/retire", None),
        ("POST", f"/v1/lessons/{entity}/supersede", {"superseded_by": entity}),
    ):
        forbidden(c["admin_a"].request(method, path, json=payload), "this needs an owner key")
    # An admin still reads them: they shape its namespace's runs.
    assert ok(c["admin_a"].get(f"/v1/lessons/{entity}")) == stored
    assert [e["event"] for e in ok(c["admin_a"].get(f"/v1/lessons/{entity}/history"))] == [
        "insert",
        "scope",
    ]
    activated = ok(c["owner_a"].post(f"/v1/lessons/{entity}/activate"))
    assert activated["status"] == "active"
