"""Lessons proposed over HTTP: ``POST /v1/lessons/propose`` with an agent key, an admin's
review (activate, reject with a reason), the cap as 429, a twin refused naming the lesson.

A real server process and a real HTTP client, on SQLite and on PostgreSQL + Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contextstore.store.sync import Store
from tests.interfaces.service.server import Server
from tests.interfaces.service.test_api import error, lesson_id

pytestmark = pytest.mark.slow


@pytest.fixture
def agent_key(server: Server, fresh_namespace: str) -> str:
    return server.key(fresh_namespace, "agent")


@pytest.fixture
def agent(server: Server, agent_key: str) -> Iterator[httpx.Client]:
    with server.client(agent_key) as client:
        yield client


@pytest.fixture
def admin(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    with server.client(server.key(fresh_namespace, "owner")) as client:
        yield client


def proposal(entity_id: str, tag: str, **fields: Any) -> dict[str, Any]:
    body = {
        "entity_id": entity_id,
        "injection_form": f"Say {entity_id} first.",
        "applies_to": [f"tag:{tag}"],
        "severity": "warning",
        "evidence": {"query": "why did it stall?"},
    }
    body.update(fields)
    return body


def run_block(client: httpx.Client, tag: str) -> str:
    response = client.post("/v1/run", json={"query": "How?", "scope": {"tags": [tag]}})
    assert response.status_code == 200, response.text
    block: str = response.json()["lesson_block"]
    return block


def test_an_agent_proposes_an_admin_activates_and_the_next_run_has_it(
    agent: httpx.Client, admin: httpx.Client, agent_key: str, store: Store, fresh_namespace: str
) -> None:
    entity_id, tag = lesson_id("prop"), f"t{uuid.uuid4().hex[:8]}"
    response = agent.post("/v1/lessons/propose", json=proposal(entity_id, tag))
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["status"], created["evidence"]) == (
        "proposed",
        {"query": "why did it stall?"},
    )
    assert created["created_at"].endswith("Z")
    assert run_block(agent, tag) == ""
    key_id = agent_key.split("_")[1]
    [made] = store.lessons.proposals([entity_id]).values()
    assert (made.proposer, made.namespace) == (f"api:{key_id}", fresh_namespace)
    # An agent may not activate it; an admin may.
    error(403, "forbidden", None, agent.post(f"/v1/lessons/{entity_id}/activate"))
    assert admin.post(f"/v1/lessons/{entity_id}/activate").json()["status"] == "active"
    assert f"Say {entity_id} first." in run_block(agent, tag)


def test_a_rejected_proposal_keeps_its_reason(
    agent: httpx.Client, admin: httpx.Client, store: Store
) -> None:
    entity_id, tag = lesson_id("prop"), "reject"
    assert agent.post("/v1/lessons/propose", json=proposal(entity_id, tag)).status_code == 201
    error(403, "forbidden", None, agent.post(f"/v1/lessons/{entity_id}/reject", json={}))
    error(422, "invalid", "reason", admin.post(f"/v1/lessons/{entity_id}/reject", json={}))
    error(
        422,
        "invalid",
        "reason",
        admin.post(f"/v1/lessons/{entity_id}/reject", json={"reason": " "}),
    )
    response = admin.post(f"/v1/lessons/{entity_id}/reject", json={"reason": "Not our policy."})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "retired"
    assert store.lessons.proposals([entity_id])[entity_id].reason == "Not our policy."


def test_a_twin_and_bad_evidence_are_refused_naming_the_field(
    agent: httpx.Client, admin: httpx.Client
) -> None:
    first, tag = lesson_id("prop"), f"t{uuid.uuid4().hex[:8]}"
    body = proposal(first, tag)
    assert agent.post("/v1/lessons/propose", json=body).status_code == 201
    twin = {**body, "entity_id": lesson_id("prop")}
    message = error(422, "invalid", "injection_form", agent.post("/v1/lessons/propose", json=twin))
    assert f"lesson {first!r} already says this" in message
    no_evidence = {**twin, "evidence": {}}
    error(422, "invalid", "evidence", agent.post("/v1/lessons/propose", json=no_evidence))
    missing = {key: value for key, value in twin.items() if key != "evidence"}
    error(422, "invalid", "evidence", agent.post("/v1/lessons/propose", json=missing))
    with_status = {**twin, "status": "active"}
    error(422, "invalid", "status", agent.post("/v1/lessons/propose", json=with_status))


def test_past_the_namespace_cap_is_429_with_retry_after(
    agent: httpx.Client, store: Store, fresh_namespace: str
) -> None:
    store.lessons.set_proposal_limit(2, namespace=fresh_namespace)
    tag = f"t{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        response = agent.post("/v1/lessons/propose", json=proposal(lesson_id("cap"), tag))
        assert response.status_code == 201, response.text
    refused = agent.post("/v1/lessons/propose", json=proposal(lesson_id("cap"), tag))
    message = error(429, "rate_limited", None, refused)
    assert message.startswith(f"namespace {fresh_namespace!r} may propose at most 2 lesson(s)")
    assert 3500 <= int(refused.headers["retry-after"]) <= 3600
