"""Lessons over HTTP: ``/v1/match`` with a query, an order and an explanation, lesson usage
from ``/v1/lessons/stats``, and the audit naming the key of every lesson write.

A real server process and a real HTTP client, on SQLite and on PostgreSQL + Redis.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from contextstore.backends.sql.models import QueryMetricRow
from contextstore.core.matching import MatchOptions, Scope, explain
from contextstore.store.sync import Store
from tests.interfaces.service.server import Server
from tests.interfaces.service.test_api import add_lesson, error, lesson_id

pytestmark = pytest.mark.slow

HEADER = "[Lessons — durable guidance distilled from prior work; matched {m}, showing {n}]"


@pytest.fixture
def owner_key(server: Server, fresh_namespace: str) -> str:
    return server.key(fresh_namespace, "owner")


@pytest.fixture
def owner(server: Server, owner_key: str) -> Iterator[httpx.Client]:
    with server.client(owner_key) as client:
        yield client


@pytest.fixture
def agent(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    with server.client(server.key(fresh_namespace, "agent")) as client:
        yield client


def form(entity_id: str) -> str:
    return f"Form of {entity_id}."


def explained(
    entity_id: str,
    keys: list[str],
    *,
    rank: int | None,
    included: bool,
    excluded_by: str | None = None,
    relevance: float | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """One ``LessonExplanation`` as the JSON the API answers."""
    return {
        "entity_id": entity_id,
        "matched_keys": keys,
        "eligible": rank is not None,
        "reason": reason,
        "rank": rank,
        "included": included,
        "excluded_by": excluded_by,
        "relevance": relevance,
        "form_bytes": len(form(entity_id).encode()),
    }


# -- /v1/match ---------------------------------------------------------------------------------


def test_match_orders_by_relevance_and_explains_every_candidate(
    owner: httpx.Client, agent: httpx.Client, store: Store
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    key = f"tag:{tag}"
    # Ids sort as their letters, so the candidates' order (by entity id) is known.
    stem = lesson_id("match")
    about, newer, warning, retired = (f"{stem}.{letter}" for letter in "abcd")
    add_lesson(
        owner,
        about,
        tag,
        status="active",
        severity="critical",
        summary="promote the postgres replica when failing over",
        created_at="2026-01-01T00:00:00Z",
    )
    add_lesson(
        owner,
        newer,
        tag,
        status="active",
        severity="critical",
        summary="flush resolver caches after a DNS change",
        created_at="2026-02-01T00:00:00Z",
    )
    add_lesson(owner, warning, tag, status="active", severity="warning")
    add_lesson(owner, retired, tag, status="active", severity="critical")
    assert owner.post(f"/v1/lessons/{retired}/retire").json()["status"] == "retired"
    scope = {"tags": [tag]}
    query = "postgres replica failover"

    # The severity order reads no query: the newer critical lesson first.
    plain = agent.post("/v1/match", json={"scope": scope, "query": query})
    assert plain.status_code == 200, plain.text
    assert plain.json() == {
        "lessons": {
            "included": [
                {"entity_id": newer, "injection_form": form(newer)},
                {"entity_id": about, "injection_form": form(about)},
                {"entity_id": warning, "injection_form": form(warning)},
            ],
            "matched_count": 3,
            "included_count": 3,
        },
        "lesson_block": "\n".join(
            [HEADER.format(m=3, n=3)]
            + [f"- {form(entity)} ({entity})" for entity in (newer, about, warning)]
        ),
        "explanation": None,
    }

    # By relevance, with k = 2: the lesson about the query first, the warning left out by k.
    body = {
        "scope": scope,
        "query": query,
        "options": {"order": "relevance", "k": 2},
        "explain": True,
    }
    response = agent.post("/v1/match", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    # The one score above zero is BM25's, computed by the library over the same lessons.
    records = [store.lessons.get(entity) for entity in (about, newer, warning)]
    options = MatchOptions(k=2, order="relevance")
    library = explain([r.to_lesson() for r in records], Scope(tags=(tag,)), options, query)
    score = library[0].relevance
    assert library[0].entity_id == about
    assert score is not None and score > 0
    assert answer == {
        "lessons": {
            "included": [
                {"entity_id": about, "injection_form": form(about)},
                {"entity_id": newer, "injection_form": form(newer)},
            ],
            "matched_count": 3,
            "included_count": 2,
        },
        "lesson_block": "\n".join(
            [HEADER.format(m=3, n=2)]
            + [f"- {form(entity)} ({entity})" for entity in (about, newer)]
        ),
        "explanation": [
            explained(about, [key], rank=1, included=True, relevance=score),
            explained(newer, [key], rank=2, included=True, relevance=0.0),
            explained(warning, [key], rank=3, included=False, excluded_by="k", relevance=0.0),
            explained(retired, [key], rank=None, included=False, reason="not active"),
        ],
    }


def test_match_byte_budget_and_an_empty_scope_are_explained(
    owner: httpx.Client, agent: httpx.Client
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    first, second = lesson_id("budget"), lesson_id("budget")
    add_lesson(owner, first, tag, status="active", severity="critical")
    add_lesson(owner, second, tag, status="active", severity="info")
    budget = len(form(first).encode())  # room for the first form only
    body = {"scope": {"tags": [tag]}, "options": {"byte_budget": budget}, "explain": True}
    answer = agent.post("/v1/match", json=body).json()
    assert answer["lessons"]["included_count"] == 1
    assert answer["explanation"] == [
        explained(first, [f"tag:{tag}"], rank=1, included=True),
        explained(second, [f"tag:{tag}"], rank=2, included=False, excluded_by="byte_budget"),
    ]
    empty = agent.post("/v1/match", json={"scope": {}, "explain": True})
    assert empty.json() == {
        "lessons": {"included": [], "matched_count": 0, "included_count": 0},
        "lesson_block": "",
        "explanation": [],
    }


def test_bad_match_input_names_the_field(agent: httpx.Client) -> None:
    scope = {"tags": ["ops"]}
    for body, field in [
        ({"scope": scope, "options": {"order": "newest"}}, "options.order"),
        ({"scope": scope, "options": {"order": 1}}, "options.order"),
        ({"scope": scope, "query": 5}, "query"),
        ({"scope": scope, "explain": "yes"}, "explain"),
        ({"scope": scope, "explain": 1}, "explain"),
        ({"scope": scope, "why": True}, "why"),
    ]:
        error(422, "invalid", field, agent.post("/v1/match", json=body))


# -- /v1/lessons/stats ----------------------------------------------------------------------


def recorded(store: Store, namespace: str) -> list[datetime]:
    """When each of the namespace's runs was recorded, oldest first (read from SQL)."""
    column = QueryMetricRow.recorded_at
    statement = sa.select(column).where(QueryMetricRow.namespace == namespace).order_by(column)
    with store.sql_engine.connect() as connection:
        return [moment.astimezone(UTC) for moment in connection.execute(statement).scalars()]


def moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).astimezone(UTC)


def test_lesson_stats_count_the_namespace_runs_exactly(
    server: Server, owner: httpx.Client, agent: httpx.Client, store: Store, fresh_namespace: str
) -> None:
    tag, lone = f"t{uuid.uuid4().hex[:8]}", f"u{uuid.uuid4().hex[:8]}"
    stem = lesson_id("stats")
    # Ten critical lessons fill a run's k = 10: the info lessons matched with them are left
    # out (``crowded`` always, ``single`` in the last run).
    critical = [f"{stem}.c{i:02d}" for i in range(10)]
    for entity in critical:
        add_lesson(owner, entity, tag, status="active", severity="critical")
    crowded = f"{stem}.info"
    add_lesson(owner, crowded, tag, status="active", severity="info")
    single = f"{stem}.lone"
    add_lesson(owner, single, lone, status="active")
    idle = f"{stem}.idle"
    add_lesson(owner, idle, f"v{uuid.uuid4().hex[:8]}", status="active")

    def run(query: str, tags: list[str] | None) -> None:
        body: dict[str, Any] = {"query": query}
        if tags:
            body["scope"] = {"tags": tags}
        assert agent.post("/v1/run", json=body).status_code == 200

    run("first question", [tag])
    run("second question", [lone])
    run("third question", None)
    time.sleep(0.05)
    since = datetime.now(UTC)
    time.sleep(0.05)
    run("fourth question", [tag])
    run("fifth question", [tag, lone])
    # Another namespace's runs never count here.
    with server.client(server.key(f"{fresh_namespace}-other")) as other:
        assert other.post("/v1/run", json={"query": "x", "scope": {"tags": [lone]}}).is_success

    at = recorded(store, fresh_namespace)
    assert len(at) == 5
    active = {
        lesson["entity_id"]
        for lesson in owner.get("/v1/lessons", params={"status": "active"}).json()
    }
    assert {*critical, crowded, single, idle} <= active

    def usage(entity: str, matched: int, included: int, last: datetime | None) -> dict[str, Any]:
        return {
            "entity_id": entity,
            "status": "active",
            "runs_matched": matched,
            "runs_included": included,
            "last_included_at": last,
        }

    def parsed(body: dict[str, Any]) -> dict[str, Any]:
        lessons = [{**row, "last_included_at": moment(row["last_included_at"])} for row in body]
        return {"lessons": lessons}

    everything = agent.get("/v1/lessons/stats")
    assert everything.status_code == 200, everything.text
    stats = everything.json()
    assert {key: stats[key] for key in ("runs", "since", "until", "namespace")} == {
        "runs": 5,
        "since": None,
        "until": None,
        "namespace": fresh_namespace,
    }
    # Most included first, then most matched, then entity id.
    assert parsed(stats["lessons"]) == {
        "lessons": [
            *(usage(entity, 3, 3, at[4]) for entity in critical),
            usage(single, 2, 1, at[1]),
            usage(crowded, 3, 0, None),
        ]
    }
    assert stats["unused"] == sorted(active - {*critical, single})
    assert crowded in stats["unused"] and idle in stats["unused"]

    recent = agent.get("/v1/lessons/stats", params={"since": since.isoformat()}).json()
    assert recent["runs"] == 2
    assert moment(recent["since"]) == since
    assert parsed(recent["lessons"]) == {
        "lessons": [
            *(usage(entity, 2, 2, at[4]) for entity in critical),
            usage(crowded, 2, 0, None),
            usage(single, 1, 0, None),
        ]
    }
    before = agent.get("/v1/lessons/stats", params={"until": since.isoformat()}).json()
    assert before["runs"] == 3
    assert parsed(before["lessons"]) == {
        "lessons": [
            *(usage(entity, 1, 1, at[0]) for entity in critical),
            usage(single, 1, 1, at[1]),
            usage(crowded, 1, 0, None),
        ]
    }
    # The same figures as the library's, for the same namespace and range.
    library = store.metrics.lesson_stats(
        since=since, namespace=fresh_namespace, all_namespaces=True
    )
    assert recent["unused"] == list(library.unused)
    assert [row["entity_id"] for row in recent["lessons"]] == [
        row.entity_id for row in library.lessons
    ]

    error(422, "invalid", "since", agent.get("/v1/lessons/stats", params={"since": "soon"}))
    # No offset: UTC, as on the command line (decision 0068); a duration back from now too.
    naive = agent.get("/v1/lessons/stats", params={"since": "2026-01-01T00:00:00"})
    assert naive.json()["since"] == "2026-01-01T00:00:00Z"
    assert agent.get("/v1/lessons/stats", params={"since": "7d"}).json()["runs"] == 5
    error(
        422, "invalid", "namespace", agent.get("/v1/lessons/stats", params={"namespace": "other"})
    )


# -- the audit --------------------------------------------------------------------------------


def test_lesson_writes_name_the_key_in_the_audit(
    server: Server, owner: httpx.Client, owner_key: str, store: Store, fresh_namespace: str
) -> None:
    key_id = owner_key.split("_")[1]
    tag = f"t{uuid.uuid4().hex[:8]}"
    old, new = lesson_id("audit"), lesson_id("audit")
    add_lesson(owner, old, tag)
    add_lesson(owner, new, tag)
    assert owner.patch(f"/v1/lessons/{old}", json={"summary": "edited"}).status_code == 200
    assert owner.post(f"/v1/lessons/{old}/activate").status_code == 200
    assert owner.post(f"/v1/lessons/{old}/retire").status_code == 200
    assert owner.post(f"/v1/lessons/{old}/activate").status_code == 200
    superseded = owner.post(f"/v1/lessons/{old}/supersede", json={"superseded_by": new})
    assert superseded.status_code == 200, superseded.text
    # A second owner key is named as itself.
    other_key = server.key(fresh_namespace, "owner")
    with server.client(other_key) as other:
        assert other.post(f"/v1/lessons/{new}/retire").status_code == 200

    events = owner.get(f"/v1/lessons/{old}/history").json()
    assert [(e["event"], e["old_status"], e["new_status"], e["actor"]) for e in events] == [
        ("insert", None, "proposed", f"api:{key_id}"),
        ("scope", None, None, f"api:{key_id}"),
        ("update", None, None, f"api:{key_id}"),
        ("status", "proposed", "active", f"api:{key_id}"),
        ("status", "active", "retired", f"api:{key_id}"),
        ("status", "retired", "active", f"api:{key_id}"),
        ("status", "active", "superseded", f"api:{key_id}"),
    ]
    # The rows themselves, read from SQL, say the same.
    stored = store.lessons.history(new)
    assert [(event.event, event.new_status, event.actor) for event in stored] == [
        ("insert", "proposed", f"api:{key_id}"),
        ("scope", None, f"api:{key_id}"),
        ("status", "active", f"api:{key_id}"),  # activated by the supersede
        ("status", "retired", f"api:{other_key.split('_')[1]}"),
    ]
