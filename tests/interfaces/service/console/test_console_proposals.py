"""The console's review queue (Proposed) over HTTP on a real server, SQLite and PostgreSQL:
who proposed what and why, activate as it is, edit then activate, reject with a reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from html import unescape

import httpx
import pytest

from contextstore.core.lessons import LessonRecord
from contextstore.store.sync import Store
from tests.interfaces.service.console.helpers import browser, csrf_of, signed_in
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow


@pytest.fixture
def admin_key(server: Server, fresh_namespace: str) -> str:
    return server.key(fresh_namespace, "owner")  # proposals are reviewed by owners


@pytest.fixture
def console(server: Server, admin_key: str) -> Iterator[httpx.Client]:
    with signed_in(server, admin_key) as client:
        yield client


def proposed(store: Store, namespace: str, evidence: str = "why did it stall?") -> LessonRecord:
    entity_id = f"queue.{uuid.uuid4().hex[:10]}"
    record = LessonRecord(
        entity_id,
        f"Form of {entity_id}.",
        "warning",
        applies_to=("tag:queue",),
        evidence={"query": evidence},
    )
    return store.lessons.as_actor("api:0123456789ab").propose(record, namespace=namespace)


def fields(record: LessonRecord, csrf: str, **changed: str) -> dict[str, str]:
    return {
        "csrf": csrf,
        "severity": record.severity,
        "summary": record.summary,
        "detail": record.detail,
        "injection_form": record.injection_form,
        "applies_to": "\n".join(record.applies_to),
        **changed,
    }


def test_the_queue_shows_who_proposed_what_and_why(
    console: httpx.Client, store: Store, fresh_namespace: str
) -> None:
    record = proposed(store, fresh_namespace, evidence="<script>alert(1)</script> stalled")
    page = console.get("/console/proposals")
    assert page.status_code == 200, page.text
    assert 'aria-current="page">Proposed</a>' in page.text
    section = page.text.split(f'data-entity-id="{record.entity_id}"')[1].split("</section>")[0]
    assert "api:0123456789ab" in section
    assert fresh_namespace in section
    assert "<script>" not in section
    assert "alert(1)" in unescape(section)
    assert unescape(section).count(record.injection_form) == 1


def test_activate_as_it_is_or_after_an_edit(
    console: httpx.Client, store: Store, fresh_namespace: str, admin_key: str
) -> None:
    plain, edited = proposed(store, fresh_namespace), proposed(store, fresh_namespace)
    csrf = csrf_of(console.get("/console/proposals").text)
    response = console.post(
        f"/console/proposals/{plain.entity_id}/activate", data=fields(plain, csrf)
    )
    assert response.status_code == 303
    assert response.headers["location"] == (
        f"/console/proposals?done=activated&lesson={plain.entity_id}"
    )
    stored = store.lessons.get(plain.entity_id)
    assert (stored.status, stored.injection_form) == ("active", plain.injection_form)
    key_id = admin_key.split("_")[1]
    assert store.lessons.proposals([plain.entity_id])[plain.entity_id].reviewer == (
        f"console:{key_id}"
    )
    changes = {"injection_form": "Edited before activation.", "applies_to": "tag:queue\ntag:ops"}
    response = console.post(
        f"/console/proposals/{edited.entity_id}/activate", data=fields(edited, csrf, **changes)
    )
    assert response.status_code == 303
    stored = store.lessons.get(edited.entity_id)
    assert (stored.status, stored.injection_form, stored.applies_to) == (
        "active",
        "Edited before activation.",
        ("tag:queue", "tag:ops"),
    )
    notice = console.get(response.headers["location"]).text
    assert f"Lesson {edited.entity_id} activated." in notice
    assert f'data-entity-id="{edited.entity_id}"' not in notice


def test_a_refused_edit_keeps_the_draft_and_activates_nothing(
    console: httpx.Client, store: Store, fresh_namespace: str
) -> None:
    record = proposed(store, fresh_namespace)
    csrf = csrf_of(console.get("/console/proposals").text)
    response = console.post(
        f"/console/proposals/{record.entity_id}/activate",
        data=fields(record, csrf, injection_form="x" * 400),
    )
    assert response.status_code == 422
    assert "injection_form: is 400 UTF-8 bytes; the limit is 320" in unescape(response.text)
    assert "x" * 400 in response.text
    assert store.lessons.get(record.entity_id) == record


def test_reject_needs_a_reason_and_keeps_it(
    console: httpx.Client, store: Store, fresh_namespace: str
) -> None:
    record = proposed(store, fresh_namespace)
    csrf = csrf_of(console.get("/console/proposals").text)
    path = f"/console/proposals/{record.entity_id}/reject"
    refused = console.post(path, data={"csrf": csrf, "reason": "  "})
    assert refused.status_code == 422
    assert "reason: say why the proposal is rejected" in unescape(refused.text)
    assert store.lessons.get(record.entity_id).status == "proposed"
    response = console.post(path, data={"csrf": csrf, "reason": "Says what ops.lag says."})
    assert response.status_code == 303
    assert store.lessons.get(record.entity_id).status == "retired"
    review = store.lessons.proposals([record.entity_id])[record.entity_id]
    assert review.reason == "Says what ops.lag says."


def test_forms_need_the_session_and_its_token(
    console: httpx.Client, server: Server, store: Store, fresh_namespace: str
) -> None:
    record = proposed(store, fresh_namespace)
    for action in ("activate", "reject"):
        path = f"/console/proposals/{record.entity_id}/{action}"
        forged = console.post(path, data={"csrf": "forged", "reason": "x"})
        assert forged.status_code == 403
        with browser(server) as anonymous:
            assert anonymous.get("/console/proposals").status_code == 303
            assert anonymous.post(path, data={"reason": "x"}).status_code == 303
    assert store.lessons.get(record.entity_id) == record
    csrf = csrf_of(console.get("/console/proposals").text)
    missing = console.post(
        "/console/proposals/queue.none/reject", data={"csrf": csrf, "reason": "x"}
    )
    assert missing.status_code == 404
