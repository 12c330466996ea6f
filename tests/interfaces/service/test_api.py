"""The HTTP API end to end: a real server process, a real HTTP client, SQLite and PostgreSQL.

Every endpoint, every error status with its JSON body, the OpenAPI document, keys and roles,
namespace isolation, and bad input that names its field and writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from contextstore import __version__
from contextstore.backends.sql.metrics.report import LessonStats, LessonUsage, MetricsReport
from contextstore.core.analysis import RuleBasedQueryAnalyzer
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document
from contextstore.core.lessons import LessonRecord
from contextstore.engine.sync import ContextResult
from contextstore.interfaces.apikeys import revoke_key
from contextstore.interfaces.service.reference import swagger_assets
from tests.backends.redis import shared_total
from tests.interfaces.service.conftest import BODY_LIMIT
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

NO_INFORMATION = "No relevant information was found."
BAD_KEY = {"Authorization": f"Bearer csk_{'0' * 12}_{'A' * 43}"}
OPEN = {"/healthz", "/readyz", "/openapi.json", "/docs"}
QUERY = "how do I fail over postgres?"


def error(status: int, kind: str, field: str | None, response: httpx.Response) -> str:
    """Assert the status and the error JSON; return its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message", "field"}
    assert body["error"]["type"] == kind, body
    assert body["error"]["field"] == field, body
    message: str = body["error"]["message"]
    assert message
    return message


@pytest.fixture
def admin(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    with server.client(server.key(fresh_namespace, "admin")) as client:
        yield client


@pytest.fixture
def owner(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    """An owner key's client: the one role that writes lessons."""
    with server.client(server.key(fresh_namespace, "owner")) as client:
        yield client


@pytest.fixture
def agent(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    with server.client(server.key(fresh_namespace, "agent")) as client:
        yield client


def lesson_id(prefix: str = "api") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def add_lesson(owner: httpx.Client, entity_id: str, tag: str, **fields: Any) -> dict[str, Any]:
    body = {"entity_id": entity_id, "injection_form": f"Form of {entity_id}.", **fields}
    body.setdefault("applies_to", [f"tag:{tag}"])
    response = owner.post("/v1/lessons", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def runs_in_report(client: httpx.Client) -> int:
    response = client.get("/v1/metrics/report")
    assert response.status_code == 200, response.text
    runs: int = response.json()["runs"]
    return runs


# -- operations and keys ---------------------------------------------------------------------


def test_healthz_needs_no_key_and_says_the_version(server: Server) -> None:
    with server.client() as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


def test_readyz_reports_sql_and_redis(server: Server, agent: httpx.Client) -> None:
    response = agent.get("/readyz")
    assert response.status_code == 200, response.text
    redis_state = "ok" if server.redis_url else "not configured"
    assert response.json() == {"status": "ok", "sql": "ok", "redis": redis_state}


def test_readyz_answers_a_probe_without_a_key_with_its_status_alone(server: Server) -> None:
    with server.client() as client:
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic dXNlcjpwYXNz"}):
            response = client.get("/readyz", headers=headers)
            assert response.status_code == 200, response.text
            assert response.json() == {"status": "ok", "sql": None, "redis": None}
        # A key that is sent must be valid, even here.
        error(401, "unauthorized", None, client.get("/readyz", headers=BAD_KEY))


def test_the_api_reference_is_open_and_loads_nothing_from_another_host(server: Server) -> None:
    with server.client() as client:
        spec = client.get("/openapi.json")
        page = client.get("/docs")
        assert (spec.status_code, page.status_code) == (200, 200)
        assert page.headers["content-type"].startswith("text/html")
        linked = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sorted(linked) == [
            "/docs/static/favicon-32x32.png",
            "/docs/static/swagger-ui-bundle.js",
            "/docs/static/swagger-ui.css",
        ]
        assert "http://" not in page.text and "https://" not in page.text
        assert "url: '/openapi.json'" in page.text
        for path in linked:
            asset = client.get(path)
            assert asset.status_code == 200, path
            assert asset.content == (swagger_assets() / path.rpartition("/")[2]).read_bytes()
        error(401, "unauthorized", None, client.get("/docs", headers=BAD_KEY))
        # The document is public; every operation in it but the probes still needs its key.
        paths = spec.json()["paths"]
        for path, item in paths.items():
            for method, operation in item.items():
                expected = {
                    "/healthz": None,
                    "/readyz": [{}, {"HTTPBearer": []}],
                }.get(path, [{"HTTPBearer": []}])
                assert operation.get("security") == expected, (method, path)
        # ...and refuses it without one.
        error(401, "unauthorized", None, client.post("/v1/run", json={"query": "x"}))


def test_every_route_but_the_open_ones_needs_a_valid_key(
    server: Server, fresh_namespace: str
) -> None:
    good = server.key(fresh_namespace)
    key_id, secret = good.split("_")[1], good.split("_", 2)[2]
    wrong_secret = f"csk_{key_id}_{'A' * len(secret)}"
    attempts = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Bearer {wrong_secret}"},
        {"Authorization": f"Bearer csk_{'0' * 12}_{secret}"},
    ]
    with server.client() as client:
        for headers in attempts:
            for method, path in [
                ("POST", "/v1/run"),
                ("GET", "/readyz"),
                ("GET", "/metrics"),
                ("GET", "/openapi.json"),
                ("GET", "/v1/lessons"),
                ("GET", "/no/such/route"),
            ]:
                if "Bearer " not in headers.get("Authorization", "") and path in OPEN:
                    continue  # no key at all: the open paths answer (tested above)
                response = client.request(method, path, headers=headers, json={"query": "x"})
                error(401, "unauthorized", None, response)
                assert response.headers["www-authenticate"] == "Bearer"
                assert secret not in response.text
    log = server.log.read_text()
    assert secret not in log
    assert key_id in log or "unauthorized" not in log


def test_a_revoked_key_is_refused_at_once(server: Server, fresh_namespace: str) -> None:
    key = server.key(fresh_namespace)
    other = server.key(fresh_namespace)
    with server.client(key) as client, server.client(other) as still_valid:
        assert client.post("/v1/run", json={"query": QUERY}).status_code == 200
        revoke_key(server.keys_file, key)
        error(401, "unauthorized", None, client.post("/v1/run", json={"query": QUERY}))
        assert still_valid.post("/v1/run", json={"query": QUERY}).status_code == 200
        # Revoking by id works the same.
        revoke_key(server.keys_file, other.split("_")[1])
        error(401, "unauthorized", None, still_valid.get("/readyz"))


def test_unknown_routes_and_methods(admin: httpx.Client) -> None:
    error(404, "not_found", None, admin.get("/v1/nothing"))
    error(405, "method_not_allowed", None, admin.get("/v1/run"))


def test_openapi_document_is_valid_and_follows_the_library_types(agent: httpx.Client) -> None:
    response = agent.get("/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    validate(spec)  # raises on any error an OpenAPI 3.1 client generator would meet
    assert {
        "/v1/run",
        "/v1/match",
        "/v1/lessons",
        "/v1/lessons/{entity_id}",
        "/v1/lessons/{entity_id}/activate",
        "/v1/lessons/{entity_id}/retire",
        "/v1/lessons/{entity_id}/supersede",
        "/v1/lessons/{entity_id}/history",
        "/v1/metrics/report",
        "/v1/lessons/stats",
        "/v1/search",
        "/v1/documents",
        "/v1/documents/import",
        "/v1/documents/{source}",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(spec["paths"])
    schemas = spec["components"]["schemas"]
    library_types = (
        LessonRecord,
        MetricsReport,
        LessonStats,
        LessonUsage,
        Chunk,
        Document,
    )
    for library_type in library_types:
        names = {field.name for field in dataclasses.fields(library_type)}
        assert set(schemas[library_type.__name__]["properties"]) == names
    run_body = schemas["RunRequest"]
    assert run_body["additionalProperties"] is False
    assert set(run_body["properties"]) == {"query", "scope", "filters", "override_budget"}
    match_body = schemas["MatchRequest"]
    assert set(match_body["properties"]) == {"scope", "options", "query", "explain"}
    assert set(schemas["MatchOptions"]["properties"]) == {"k", "byte_budget", "order"}
    # A run and a match are the result shapes every interface shares (test_result_shape).
    explanation = schemas["MatchJson"]["properties"]["explanation"]["anyOf"][0]
    assert explanation["items"] == {"$ref": "#/components/schemas/ExplanationJson"}
    answer = spec["paths"]["/v1/run"]["post"]["responses"]["200"]["content"]["application/json"]
    assert answer["schema"] == {"$ref": "#/components/schemas/RunJson"}
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    request_ref = spec["paths"]["/v1/run"]["post"]["requestBody"]["content"]["application/json"]
    assert request_ref["schema"] == {"$ref": "#/components/schemas/RunRequest"}


# -- runs -------------------------------------------------------------------------------------


def test_run_returns_the_context_result(
    server: Server, admin: httpx.Client, owner: httpx.Client
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    first, second = lesson_id(), lesson_id()
    add_lesson(owner, first, tag, status="active", severity="warning")
    add_lesson(owner, second, tag, status="active", severity="critical")
    body = {"query": QUERY, "scope": {"tags": [tag]}}
    response = admin.post("/v1/run", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert set(result) == {"prompt"} | {field.name for field in dataclasses.fields(ContextResult)}
    assert result["context"] == NO_INFORMATION
    assert result["lesson_block"] == (
        "[Lessons — durable guidance distilled from prior work; matched 2, showing 2]\n"
        f"- Form of {second}. ({second})\n- Form of {first}. ({first})"
    )
    assert result["lessons"] == {
        "included": [
            {"entity_id": second, "injection_form": f"Form of {second}."},
            {"entity_id": first, "injection_form": f"Form of {first}."},
        ],
        "matched_count": 2,
        "included_count": 2,
    }
    analysis = RuleBasedQueryAnalyzer().analyze(QUERY)
    assert result["query_analysis"] == {
        "original_query": QUERY,
        "normalized": analysis.normalized,
        "intent": analysis.intent.value,
        "complexity": analysis.complexity.value,
        "keywords": list(analysis.keywords),
        "entities": list(analysis.entities),
        "is_arabic": False,
        "language": analysis.language,
        "question_type": analysis.question_type,
        "context_budget": analysis.context_budget,
    }
    assert result["budget"] == analysis.context_budget
    assert result["chunks_used"] == []
    assert result["totals"] == {"retrieved": 0, "filtered": 0, "used": 0}
    assert result["context_length"] == len(NO_INFORMATION)
    assert result["guard_passed"] is True
    assert result["guard_warnings"] == ["no valid source found in context."]
    assert result["cache_hit"] is False
    assert result["prompt"] == f"{result['lesson_block']}\n\n{NO_INFORMATION}"
    again = admin.post("/v1/run", json={**body, "override_budget": 500, "filters": {"a": 1}})
    assert again.json()["budget"] == 500
    assert admin.post("/v1/run", json=body).json()["cache_hit"] is True
    assert runs_in_report(admin) == 3


BAD_RUNS: list[tuple[bytes, int, str, str | None]] = [
    (b'{"query": ', 400, "malformed_json", "body"),
    (b"", 400, "malformed_json", "body"),
    (b'{"query": "caf\xe9"}', 400, "malformed_body", "body"),
    (b'{"query": "\\ud800"}', 400, "malformed_json", "body"),
    (b"[1, 2]", 422, "invalid", "body"),
    (b"{}", 422, "invalid", "query"),
    (b'{"query": 5}', 422, "invalid", "query"),
    (b'{"query": "x", "override_budget": "5"}', 422, "invalid", "override_budget"),
    (b'{"query": "x", "override_budget": 5.5}', 422, "invalid", "override_budget"),
    (b'{"query": "x", "override_budget": 0}', 422, "invalid", "override_budget"),
    (b'{"query": "x", "override_budget": true}', 422, "invalid", "override_budget"),
    (b'{"query": "x", "filters": [1]}', 422, "invalid", "filters"),
    (b'{"query": "x", "scope": {"tags": "ops"}}', 422, "invalid", "scope.tags"),
    (b'{"query": "x", "scope": {"tags": ["ops", 3]}}', 422, "invalid", "scope.tags[1]"),
    (b'{"query": "x", "namespace": "other"}', 422, "invalid", "namespace"),
    (b'{"query": "x", "scope": {"tags": [], "extra": 1}}', 422, "invalid", "scope.extra"),
]


def test_bad_run_input_names_the_field_and_writes_nothing(
    server: Server, agent: httpx.Client
) -> None:
    for raw, status, kind, field in BAD_RUNS:
        response = agent.post("/v1/run", content=raw, headers={"content-type": "application/json"})
        error(status, kind, field, response)
    oversized = b'{"query": "' + b"x" * BODY_LIMIT + b'"}'
    error(413, "body_too_large", "body", agent.post("/v1/run", content=oversized))

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted as it streams
        yield b'{"query": "'
        for _ in range(BODY_LIMIT // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    error(413, "body_too_large", "body", agent.post("/v1/run", content=chunks()))
    assert runs_in_report(agent) == 0


def test_a_run_sees_only_its_own_namespace(server: Server, fresh_namespace: str) -> None:
    other = f"{fresh_namespace}-b"
    with server.client(server.key(fresh_namespace)) as a, server.client(server.key(other)) as b:
        for _ in range(3):
            assert a.post("/v1/run", json={"query": QUERY}).status_code == 200
        # Same query, other namespace: its own cache (a miss), its own metrics and windows.
        assert b.post("/v1/run", json={"query": QUERY}).json()["cache_hit"] is False
        assert runs_in_report(a) == 3
        assert runs_in_report(b) == 1
        # No route takes a namespace from the caller.
        error(422, "invalid", "namespace", a.get("/v1/metrics/report", params={"namespace": other}))
    if server.redis_url:
        client = redis.Redis.from_url(server.redis_url)
        try:
            assert shared_total(client, fresh_namespace) == 3
            assert shared_total(client, other) == 1
        finally:
            client.close()


# -- lessons and match ----------------------------------------------------------------------


def test_lesson_administration(owner: httpx.Client) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    old, new = lesson_id(), lesson_id()
    created = add_lesson(owner, old, tag, severity="warning", summary="first")
    assert created["status"] == "proposed"
    assert created["created_at"] == created["updated_at"]
    add_lesson(owner, new, tag)
    assert owner.get(f"/v1/lessons/{old}").json() == created

    listed = owner.get("/v1/lessons", params={"tag": tag})
    assert [lesson["entity_id"] for lesson in listed.json()] == sorted([old, new])
    warnings = owner.get("/v1/lessons", params={"tag": tag, "severity": "warning"}).json()
    assert [lesson["entity_id"] for lesson in warnings] == [old]
    assert len(owner.get("/v1/lessons", params={"tag": tag, "limit": 1}).json()) == 1

    edited = owner.patch(f"/v1/lessons/{old}", json={"summary": "second", "applies_to": []})
    assert edited.status_code == 200, edited.text
    assert edited.json()["summary"] == "second"
    assert edited.json()["applies_to"] == []
    assert edited.json()["created_at"] == created["created_at"]
    assert edited.json()["injection_form"] == created["injection_form"]

    assert owner.post(f"/v1/lessons/{old}/activate").json()["status"] == "active"
    superseded = owner.post(f"/v1/lessons/{old}/supersede", json={"superseded_by": new})
    assert superseded.json()["status"] == "superseded"
    assert superseded.json()["superseded_by"] == new
    assert owner.get(f"/v1/lessons/{new}").json()["status"] == "active"
    assert owner.post(f"/v1/lessons/{new}/retire").json()["status"] == "retired"

    history = owner.get(f"/v1/lessons/{old}/history").json()
    changes = [(event["old_status"], event["new_status"]) for event in history]
    assert (None, "proposed") in changes
    assert ("proposed", "active") in changes
    assert ("active", "superseded") in changes
    assert all(event["lesson_id"] == old for event in history)


def test_bad_lesson_input_names_the_field_and_writes_nothing(owner: httpx.Client) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    entity = lesson_id()
    stored = add_lesson(owner, entity, tag)
    base = {"entity_id": lesson_id(), "injection_form": "x"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({**base, "severity": "urgent"}, "severity"),
        ({**base, "status": "done"}, "status"),
        ({**base, "applies_to": ["team:x"]}, "applies_to"),
        ({**base, "applies_to": "tag:x"}, "applies_to"),
        ({**base, "injection_form": "é" * 161}, "injection_form"),
        ({**base, "entity_id": "a..b"}, "entity_id"),
        ({**base, "created_at": "yesterday"}, "created_at"),
        ({**base, "created_at": "2026-01-01T00:00:00"}, "created_at"),
        ({**base, "colour": "red"}, "colour"),
        ({**base, "summary": 7}, "summary"),
        ({"injection_form": "x"}, "entity_id"),
        ({**base, "entity_id": entity}, "entity_id"),
    ]
    for body, field in cases:
        error(422, "invalid", field, owner.post("/v1/lessons", json=body))
    assert owner.get("/v1/lessons", params={"tag": tag}).json() == [stored]
    error(404, "not_found", "entity_id", owner.get(f"/v1/lessons/{base['entity_id']}"))

    for body, field in [
        ({"severity": "urgent"}, "severity"),
        ({"injection_form": "é" * 161}, "injection_form"),
        ({"created_at": "2026-01-01T00:00:00Z"}, "created_at"),
        ({"summary": ["x"]}, "summary"),
    ]:
        error(422, "invalid", field, owner.patch(f"/v1/lessons/{entity}", json=body))
    assert owner.get(f"/v1/lessons/{entity}").json() == stored
    error(404, "not_found", "entity_id", owner.patch("/v1/lessons/no.such", json={}))
    error(404, "not_found", "entity_id", owner.post("/v1/lessons/no.such/activate"))
    missing = owner.post(f"/v1/lessons/{entity}/supersede", json={"superseded_by": "no.such"})
    error(404, "not_found", "superseded_by", missing)
    error(422, "invalid", "superseded_by", owner.post(f"/v1/lessons/{entity}/supersede", json={}))
    error(422, "invalid", "status", owner.get("/v1/lessons", params={"status": "done"}))
    error(422, "invalid", "limit", owner.get("/v1/lessons", params={"limit": "-1"}))
    error(422, "invalid", "colour", owner.get("/v1/lessons", params={"colour": "red"}))
    assert owner.get(f"/v1/lessons/{entity}").json() == stored


def test_agent_keys_get_403_on_every_lesson_route(
    admin: httpx.Client, owner: httpx.Client, agent: httpx.Client
) -> None:
    entity = lesson_id()
    stored = add_lesson(owner, entity, "agents")
    calls = [
        ("GET", "/v1/lessons", None),
        ("POST", "/v1/lessons", {"entity_id": lesson_id(), "injection_form": "x"}),
        ("GET", f"/v1/lessons/{entity}", None),
        ("PATCH", f"/v1/lessons/{entity}", {"summary": "agent was here"}),
        ("POST", f"/v1/lessons/{entity}/activate", None),
        ("POST", f"/v1/lessons/{entity}/retire", None),
        ("POST", f"/v1/lessons/{entity}/supersede", {"superseded_by": entity}),
        ("GET", f"/v1/lessons/{entity}/history", None),
        ("GET", "/metrics", None),
    ]
    for method, path, body in calls:
        error(403, "forbidden", None, agent.request(method, path, json=body))
    assert admin.get(f"/v1/lessons/{entity}").json() == stored


def test_match_ranks_the_active_lessons_of_a_scope(
    owner: httpx.Client, agent: httpx.Client
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    info, critical, proposed = lesson_id(), lesson_id(), lesson_id()
    add_lesson(owner, info, tag, status="active")
    add_lesson(owner, critical, tag, status="active", severity="critical")
    add_lesson(owner, proposed, tag)
    response = agent.post("/v1/match", json={"scope": {"tags": [tag]}, "options": {"k": 1}})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "lessons": {
            "included": [{"entity_id": critical, "injection_form": f"Form of {critical}."}],
            "matched_count": 2,
            "included_count": 1,
        },
        "lesson_block": (
            "[Lessons — durable guidance distilled from prior work; matched 2, showing 1]\n"
            f"- Form of {critical}. ({critical})"
        ),
        "explanation": None,
    }
    error(422, "invalid", "scope", agent.post("/v1/match", json={}))
    error(
        422,
        "invalid",
        "options.k",
        agent.post("/v1/match", json={"scope": {}, "options": {"k": "1"}}),
    )


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_report_and_prometheus_count_exactly(
    server: Server, admin: httpx.Client, agent: httpx.Client, fresh_namespace: str
) -> None:
    for query in ("alpha", "alpha", "beta"):
        assert agent.post("/v1/run", json={"query": query}).status_code == 200
    report = agent.get("/v1/metrics/report").json()
    assert report["runs"] == 3
    assert report["cache_hit_rate"] == pytest.approx(1 / 3)
    assert report["namespace"] == fresh_namespace
    assert [row["complexity"] for row in report["by_complexity"]] == ["low", "medium", "high"]
    future = agent.get("/v1/metrics/report", params={"since": "2999-01-01T00:00:00Z"})
    assert future.json()["runs"] == 0
    error(422, "invalid", "since", agent.get("/v1/metrics/report", params={"since": "soon"}))
    # The forms the library and the command line take: a duration back from now, ISO 8601
    # (UTC without an offset); choices in any case, an unknown one refused with the values.
    for since in ("24h", "7d", "2020-01-01T00:00:00", "2020-01-01"):
        assert agent.get("/v1/metrics/report", params={"since": since}).json()["runs"] == 3
    high = agent.get("/v1/metrics/report", params={"complexity": "HIGH", "until": "0s"}).json()
    assert (high["complexity"], high["until"] is not None) == ("high", True)
    refused = agent.get("/v1/metrics/report", params={"intent": "procedurall"})
    assert error(422, "invalid", "intent", refused) == (
        "'procedurall' is not one of factual, reasoning, comparative, procedural, code, "
        "summarize, unknown"
    )
    # The library's ``levels`` (the console's) is no query parameter: the levels are always there.
    error(422, "invalid", "levels", agent.get("/v1/metrics/report", params={"levels": "false"}))

    exposition = admin.get("/metrics")
    assert exposition.status_code == 200
    assert exposition.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, sample.labels.get("namespace"), sample.labels.get("le")): sample.value
        for family in text_string_to_metric_families(exposition.text)
        for sample in family.samples
    }
    ns = fresh_namespace
    assert samples[("contextstore_runs_total", ns, None)] == 3
    assert samples[("contextstore_cache_hits_total", ns, None)] == 1
    assert samples[("contextstore_cache_misses_total", ns, None)] == 2
    assert samples[("contextstore_run_seconds_count", ns, None)] == 3
    assert samples[("contextstore_run_seconds_bucket", ns, "+Inf")] == 3


def test_access_log_is_one_json_line_per_request_without_secrets(
    server: Server, fresh_namespace: str
) -> None:
    key = server.key(fresh_namespace, "admin")
    key_id, secret = key.split("_")[1], key.split("_", 2)[2]
    marker = f"/v1/lessons/log.{uuid.uuid4().hex[:8]}"
    with server.client(key) as client:
        assert client.get(marker).status_code == 404
    deadline = time.monotonic() + 5
    while marker not in server.log.read_text():
        assert time.monotonic() < deadline, "no access line"
        time.sleep(0.05)
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if marker in line]
    assert len(lines) == 1
    entry = lines[0]
    assert entry["logger"] == "contextstore.interfaces.service.access"
    assert (entry["method"], entry["path"], entry["status"]) == ("GET", marker, 404)
    assert (entry["key_id"], entry["namespace"]) == (key_id, fresh_namespace)
    assert entry["ms"] >= 0
    assert secret not in server.log.read_text()


# -- knowledge ------------------------------------------------------------------------------

RUNBOOK = (
    "To fail over the primary Postgres cluster, promote the replica with the least lag, "
    "then repoint the service address and watch the error rate for ten minutes."
)


def test_documents_search_and_runs_use_the_namespace_knowledge(
    server: Server, admin: httpx.Client, agent: httpx.Client, fresh_namespace: str
) -> None:
    added = admin.post(
        "/v1/documents",
        json={"source": "runbooks/failover.md", "text": RUNBOOK, "metadata": {"team": "ops"}},
    )
    assert added.status_code == 201, added.text
    document = added.json()
    assert document["source"] == "runbooks/failover.md"
    assert document["metadata"] == {"team": "ops"}
    assert document["chunk_count"] == 1
    assert admin.get("/v1/documents/runbooks/failover.md").json()["passages"] == [RUNBOOK]

    lines = [
        {
            "source": "notes/dns.md",
            "text": "DNS changes take up to an hour to reach every resolver.",
        },
        {"source": "runbooks/failover.md", "text": RUNBOOK, "metadata": {"team": "ops"}},
    ]
    body = "\n".join(json.dumps(line) for line in lines) + "\n"
    imported = admin.post(
        "/v1/documents/import", content=body, headers={"content-type": "application/x-ndjson"}
    )
    assert imported.json() == {"added": 1, "updated": 0, "unchanged": 1}
    listed = admin.get("/v1/documents").json()
    assert [d["source"] for d in listed] == ["notes/dns.md", "runbooks/failover.md"]
    assert [
        d["source"] for d in admin.get("/v1/documents", params={"prefix": "notes/"}).json()
    ] == ["notes/dns.md"]

    found = agent.post("/v1/search", json={"query": "fail over postgres replica", "top_k": 3})
    assert found.status_code == 200, found.text
    assert [chunk["source"] for chunk in found.json()] == ["runbooks/failover.md"]
    assert found.json()[0]["text"] == RUNBOOK
    filtered = agent.post(
        "/v1/search", json={"query": "fail over postgres", "filters": {"team": "support"}}
    )
    assert filtered.json() == []

    run = agent.post("/v1/run", json={"query": "How do I fail over the Postgres replica?"})
    assert [chunk["source"] for chunk in run.json()["chunks_used"]] == ["runbooks/failover.md"]
    assert "[Source: runbooks/failover.md]" in run.json()["context"]

    # Another namespace sees none of it.
    with server.client(server.key(f"{fresh_namespace}-other", "admin")) as other:
        assert other.post("/v1/search", json={"query": "fail over postgres"}).json() == []
        assert other.get("/v1/documents").json() == []
        error(404, "not_found", None, other.delete("/v1/documents/notes/dns.md"))

    assert admin.delete("/v1/documents/notes/dns.md").status_code == 204
    error(404, "not_found", None, admin.get("/v1/documents/notes/dns.md"))


def test_bad_knowledge_input_names_the_field_and_writes_nothing(
    admin: httpx.Client, agent: httpx.Client
) -> None:
    for body, field in [
        ({"source": "a.md", "text": ""}, "text"),
        ({"source": "", "text": "some text here"}, "source"),
        ({"source": "a.md", "text": "some text", "colour": 1}, "colour"),
        ({"source": "a.md", "text": 5}, "text"),
        ({"text": "some text"}, "source"),
    ]:
        error(422, "invalid", field, admin.post("/v1/documents", json=body))
    half_bad = b'{"source": "ok.md", "text": "a fine document"}\n{"source": "bad.md"}\n'
    message = error(
        422, "invalid", "line 2.text", admin.post("/v1/documents/import", content=half_bad)
    )
    assert message
    not_utf8 = b'{"source": "x.md", "text": "caf\xe9"}\n'
    error(422, "invalid", "line 1", admin.post("/v1/documents/import", content=not_utf8))
    assert admin.get("/v1/documents").json() == []
    error(422, "invalid", "top_k", agent.post("/v1/search", json={"query": "x", "top_k": "5"}))
    error(422, "invalid", "query", agent.post("/v1/search", json={}))
    for method, path in [
        ("GET", "/v1/documents"),
        ("POST", "/v1/documents"),
        ("POST", "/v1/documents/import"),
        ("GET", "/v1/documents/a.md"),
        ("DELETE", "/v1/documents/a.md"),
    ]:
        error(
            403, "forbidden", None, agent.request(method, path, json={"source": "a", "text": "b"})
        )
