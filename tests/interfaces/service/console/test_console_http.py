"""The console over HTTP on a real server (SQLite, and PostgreSQL with Redis): sign-in, the
session cookie, CSRF, escaping, and pages whose numbers are the reports'."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape

import httpx
import pytest

from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.lessons import LessonRecord
from contextstore.core.metrics import RunTrace
from contextstore.interfaces.apikeys import revoke_key
from contextstore.store.sync import Store, connect
from tests.factories import make_metric
from tests.interfaces.service.console.helpers import browser, csrf_of, sign_in, signed_in
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

PAGES = [
    "/console/",
    "/console/?range=all",
    "/console/lessons",
    "/console/lessons?q=x",
    "/console/explain?tags=a",
    "/console/lessons/any.lesson",
    "/console/documents",
    "/console/documents/view?source=a",
]


@pytest.fixture
def admin_key(server: Server, fresh_namespace: str) -> str:
    return server.key(fresh_namespace, "admin")


@pytest.fixture
def console(server: Server, admin_key: str) -> Iterator[httpx.Client]:
    with signed_in(server, admin_key) as client:
        yield client


@pytest.fixture
def owner_key(server: Server, fresh_namespace: str) -> str:
    return server.key(fresh_namespace, "owner")


@pytest.fixture
def owner_console(server: Server, owner_key: str) -> Iterator[httpx.Client]:
    """Signed in with an owner key: the one role that changes lessons."""
    with signed_in(server, owner_key) as client:
        yield client


def tenant(server: Server, namespace: str) -> Store:
    """The server's database as one namespace's store: its metrics are that namespace's."""
    return connect(database_url=server.database_url, redis_url="", namespace=namespace)


def new_lesson(store: Store, **fields: object) -> LessonRecord:
    entity_id = f"console.{uuid.uuid4().hex[:10]}"
    values: dict[str, object] = {
        "injection_form": f"Form of {entity_id}.",
        "status": "active",
        "applies_to": ("tag:console",),
        **fields,
    }
    return store.lessons.add(LessonRecord(entity_id=entity_id, **values))  # type: ignore[arg-type]


def post_form(client: httpx.Client, path: str, **fields: str) -> httpx.Response:
    return client.post(path, data=fields)


# -- sessions ------------------------------------------------------------------------------


def test_no_page_without_a_session(server: Server, store: Store) -> None:
    lesson = new_lesson(store)
    with browser(server) as anonymous:
        for path in PAGES:
            response = anonymous.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"] == "/console/signin"
        for action in ("retire", "activate", "edit"):
            response = anonymous.post(
                f"/console/lessons/{lesson.entity_id}/{action}", data={"summary": "changed"}
            )
            assert response.status_code == 303
        forged = browser(server)
        forged.cookies.set(
            "contextstore_console", "0123456789ab.1.AAAAAAAAAAAAAAAAAAAAAA." + "A" * 43
        )
        assert forged.get("/console/").status_code == 303
        forged.close()
    assert store.lessons.get(lesson.entity_id) == lesson
    assert browser(server).get("/").headers["location"] == "/console/"


def test_admin_sign_in_sets_a_strict_http_only_cookie(server: Server, admin_key: str) -> None:
    with browser(server) as client:
        response = sign_in(client, admin_key)
        assert response.status_code == 303
        cookie = next(
            value
            for name, value in response.headers.multi_items()
            if name == "set-cookie" and value.startswith("contextstore_console=")
        )
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "samesite", "max-age"} <= attributes
        assert "samesite=strict" in cookie.lower()
        assert "path=/console" in cookie.lower()
        assert "secure" not in attributes  # served over plain http here
        page = client.get("/console/")
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
        # The API still wants a bearer key: the console's cookie opens no API route.
        assert client.get("/v1/lessons").status_code == 401

        out = client.post("/console/signout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303
        assert out.headers["location"] == "/console/signin"
        assert client.get("/console/").status_code == 303


def test_agent_and_invalid_keys_are_refused_at_sign_in(
    server: Server, fresh_namespace: str
) -> None:
    agent_key = server.key(fresh_namespace, "agent")
    with browser(server) as client:
        refused = sign_in(client, agent_key)
        assert refused.status_code == 403
        assert "Agent keys cannot sign in" in refused.text
        assert "contextstore_console=" not in refused.headers.get("set-cookie", "")
        assert client.get("/console/").status_code == 303
        wrong = sign_in(client, agent_key[:-4] + "AAAA")
        assert wrong.status_code == 401
        assert "That key is not valid." in wrong.text
        assert sign_in(client, "").status_code == 401


def test_sign_in_needs_its_own_csrf_token(server: Server, admin_key: str) -> None:
    with browser(server) as client:
        client.get("/console/signin")
        missing = client.post("/console/signin", data={"key": admin_key})
        assert missing.status_code == 403
        forged = client.post("/console/signin", data={"key": admin_key, "csrf": "A" * 43})
        assert forged.status_code == 403
    with browser(server) as fresh:  # a token from another browser's form, without its cookie
        token = csrf_of(browser(server).get("/console/signin").text)
        assert (
            fresh.post("/console/signin", data={"key": admin_key, "csrf": token}).status_code == 403
        )
        assert fresh.get("/console/").status_code == 303


def test_a_revoked_key_ends_its_sessions(server: Server, fresh_namespace: str) -> None:
    key = server.key(fresh_namespace, "admin")
    with signed_in(server, key) as client:
        assert client.get("/console/lessons").status_code == 200
        revoke_key(server.keys_file, key)
        assert client.get("/console/lessons").status_code == 303


# -- CSRF on every form ----------------------------------------------------------------------


def test_forged_or_missing_csrf_tokens_are_refused(
    server: Server, store: Store, owner_console: httpx.Client, fresh_namespace: str
) -> None:
    console = owner_console
    lesson = new_lesson(store)
    base = f"/console/lessons/{lesson.entity_id}"
    with signed_in(server, server.key(fresh_namespace, "owner")) as other:
        others_token = csrf_of(other.get("/console/").text)
    for token in (None, "", "A" * 43, others_token):
        fields = {} if token is None else {"csrf": token}
        for action, extra in (("retire", {}), ("edit", {"summary": "forged", "severity": "info"})):
            response = console.post(f"{base}/{action}", data={**fields, **extra})
            assert response.status_code == 403, (action, token)
            assert "security token is missing or wrong" in response.text
        signout = console.post("/console/signout", data=fields)
        assert signout.status_code == 403
    assert store.lessons.get(lesson.entity_id) == lesson
    assert console.get("/console/").status_code == 200  # still signed in


# -- lessons ---------------------------------------------------------------------------------


def test_lesson_text_is_escaped(store: Store, console: httpx.Client) -> None:
    hostile = "<script>alert('x')</script>"
    lesson = new_lesson(store, injection_form=hostile, summary=f"<b>{hostile}</b>")
    for path in (f"/console/lessons/{lesson.entity_id}", f"/console/lessons?q={lesson.entity_id}"):
        page = console.get(path)
        assert page.status_code == 200
        assert "<script" not in page.text
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
    detail = console.get(f"/console/lessons/{lesson.entity_id}").text
    form = re.search(r'<pre id="injection-form">(.*?)</pre>', detail, re.S)
    assert form is not None and unescape(form.group(1)) == hostile


def test_search_filter_retire_activate_and_edit(
    store: Store, owner_console: httpx.Client, owner_key: str
) -> None:
    console = owner_console
    marker = uuid.uuid4().hex[:8]
    found = new_lesson(store, summary=f"Retry with BACKOFF {marker}", severity="warning")
    other = new_lesson(store, summary=f"unrelated {marker}", severity="info")
    page = console.get("/console/lessons", params={"q": f"backoff {marker}"})
    assert page.status_code == 200
    assert re.findall(r'data-lesson="([^"]+)"', page.text) == [found.entity_id]
    by_severity = console.get("/console/lessons", params={"q": marker, "severity": "info"})
    assert re.findall(r'data-lesson="([^"]+)"', by_severity.text) == [other.entity_id]
    bad = console.get("/console/lessons", params={"status": "gone"})
    assert bad.status_code == 422
    assert "status: &#39;gone&#39; is not one of" in bad.text

    base = f"/console/lessons/{found.entity_id}"
    token = csrf_of(console.get(base).text)
    retired = console.post(f"{base}/retire", data={"csrf": token})
    assert retired.status_code == 303
    assert retired.headers["location"] == f"{base}?done=retired"
    assert store.lessons.get(found.entity_id).status == "retired"
    history = console.get(base).text
    assert re.findall(r"<td>(insert|status)</td><td>(\w*)</td><td>(\w*)</td>", history) == [
        ("insert", "", "active"),
        ("status", "active", "retired"),
    ]
    assert console.post(f"{base}/activate", data={"csrf": token}).status_code == 303
    assert store.lessons.get(found.entity_id).status == "active"

    edited = console.post(
        f"{base}/edit",
        data={
            "csrf": token,
            "severity": "critical",
            "summary": "Back off",
            "detail": "line one\r\nline two",
            "injection_form": "Back off exponentially.",
            "applies_to": "tag:console\r\nid:billing",
        },
    )
    assert edited.status_code == 303
    record = store.lessons.get(found.entity_id)
    assert (record.severity, record.summary, record.detail, record.injection_form) == (
        "critical",
        "Back off",
        "line one\nline two",
        "Back off exponentially.",
    )
    assert record.applies_to == ("tag:console", "id:billing")

    refused = console.post(
        f"{base}/edit",
        data={
            "csrf": token,
            "severity": "critical",
            "injection_form": "x" * 321,
            "applies_to": "tag:console",
        },
    )
    assert refused.status_code == 422
    assert "injection_form" in refused.text
    assert store.lessons.get(found.entity_id) == record
    # Every change made here is audited under the console and the owner key's id.
    by = f"console:{owner_key.split('_')[1]}"
    events = store.lessons.history(found.entity_id)
    assert [event.event for event in events] == [
        "insert",
        "scope",
        "status",
        "status",
        "update",
        "scope",
    ]
    assert {event.actor for event in events[2:]} == {by}
    page_text = console.get(base).text
    assert page_text.count(f'<td class="actor">{by}</td>') == 4
    # Each change as column: old → new, the words of 'lessons show'.
    changed = re.findall(r'<span class="change">([^<]*)</span>', page_text)
    expected = [
        "applies_to: + tag:console",
        "status: active → retired",
        "status: retired → active",
        "severity: warning → critical",
        f"summary: Retry with BACKOFF {marker} → Back off",
        "detail: &#34;&#34; → line one\nline two",
        f"injection_form: Form of {found.entity_id}. → Back off exponentially.",
        "applies_to: + id:billing",
    ]
    # Events in order; one update's columns in the order its database keeps them.
    assert (changed[:3], changed[-1]) == (expected[:3], expected[-1])
    assert sorted(changed) == sorted(expected)

    superseded = new_lesson(store)
    store.lessons.supersede(superseded.entity_id, found.entity_id)
    refused_status = console.post(
        f"/console/lessons/{superseded.entity_id}/activate", data={"csrf": token}
    )
    assert refused_status.status_code == 422
    assert "status:" in refused_status.text
    assert store.lessons.get(superseded.entity_id).status == "superseded"
    assert console.post(f"{base}/promote", data={"csrf": token}).status_code == 404
    assert console.get("/console/lessons/no.such.lesson").status_code == 404


def test_an_admin_reads_lessons_and_only_an_owner_changes_them(
    store: Store, console: httpx.Client, owner_console: httpx.Client
) -> None:
    lesson = new_lesson(store)
    base = f"/console/lessons/{lesson.entity_id}"
    page = console.get(base)
    assert page.status_code == 200
    assert 'id="owners-only"' in page.text
    assert f'action="{base}/retire"' not in page.text and f'action="{base}/edit"' not in page.text
    token = csrf_of(page.text)  # the sign-out form's: a valid token, the role still refused
    for action, extra in (("retire", {}), ("edit", {"summary": "admin", "severity": "info"})):
        refused = console.post(f"{base}/{action}", data={"csrf": token, **extra})
        assert refused.status_code == 403, action
        assert "only an owner key changes them" in refused.text
    assert store.lessons.get(lesson.entity_id) == lesson

    owned = owner_console.get(base).text
    assert 'id="owners-only"' not in owned and f'action="{base}/retire"' in owned
    retired = owner_console.post(f"{base}/retire", data={"csrf": csrf_of(owned)})
    assert retired.status_code == 303
    assert store.lessons.get(lesson.entity_id).status == "retired"


def test_explain_ranks_the_active_lessons_and_shows_the_inactive_ones(
    store: Store, console: httpx.Client
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    info = new_lesson(store, applies_to=(f"tag:{tag}",), severity="info")
    critical = new_lesson(store, applies_to=(f"tag:{tag}",), severity="critical")
    retired = new_lesson(store, applies_to=(f"tag:{tag}",), status="retired")
    proposed = new_lesson(store, applies_to=(f"tag:{tag}",), status="proposed")
    superseded = new_lesson(
        store, applies_to=(f"tag:{tag}",), status="superseded", superseded_by=info.entity_id
    )
    # The inactive ones follow the ranked ones, by entity id (the candidates' order).
    inactive = sorted(
        [(lesson.entity_id, "not active") for lesson in (retired, proposed, superseded)]
    )
    page = console.get("/console/explain", params={"tags": tag})
    assert page.status_code == 200
    rows = r'<tr data-lesson="([^"]+)" data-outcome="([^"]+)">'
    assert re.findall(rows, page.text) == [
        (critical.entity_id, "included"),
        (info.entity_id, "included"),
        *inactive,
    ]
    assert page.text.count("not eligible: not active") == 3
    assert "2 active lessons match; the block includes 2" in page.text
    bounded = console.get("/console/explain", params={"tags": tag, "k": "1"})
    assert re.findall(rows, bounded.text) == [
        (critical.entity_id, "included"),
        (info.entity_id, "k"),
        *inactive,
    ]
    assert "left out: k lessons already included" in bounded.text
    bad = console.get("/console/explain", params={"tags": tag, "order": "random"})
    assert bad.status_code == 422
    assert "order: must be one of severity, relevance" in bad.text


# -- overview ---------------------------------------------------------------------------------


def figures(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-figure="(\w+)" data-value="([^"]*)"', html))


def test_overview_shows_the_reports_figures(
    server: Server, store: Store, console: httpx.Client, admin_key: str, fresh_namespace: str
) -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rows = [
        make_metric(
            start + timedelta(minutes=7 * i),
            namespace=fresh_namespace,
            response_ms=float(10 + (i * 37) % 91) + 0.25,
            cache_hit=i % 3 == 0,
            guard_passed=i % 5 != 0,
            complexity=("low", "medium", "high")[i % 3],
            intent=("factual", "procedural")[i % 2],
            worker=f"agent-{i % 3}",
            trace=RunTrace(lessons_included=("lesson.a", "lesson.b")[: i % 3]),
        )
        for i in range(40)
    ]
    elsewhere = f"{fresh_namespace}-other"
    with tenant(server, fresh_namespace) as own, tenant(server, elsewhere) as other:
        own.metrics.record_many(rows)
        other.metrics.record(make_metric(start, namespace=elsewhere, response_ms=9e3))
    with server.client(admin_key) as api:
        expected = api.get("/v1/metrics/report").json()
    page = console.get("/console/", params={"range": "all"})
    assert page.status_code == 200
    shown = figures(page.text)
    assert int(shown["runs"]) == expected["runs"] == 40
    for name in ("p50_ms", "p95_ms", "p99_ms", "cache_hit_rate", "guard_failure_rate"):
        assert float(shown[name]) == expected[name], name
    assert page.text.count('<svg class="chart"') == 4
    complexity = dict(
        re.findall(
            r'<tr data-group="(\w+)">\s*<th scope="row">\w+</th>\s*'
            r'<td class="n" data-value="(\d+)"',
            page.text,
        )
    )
    assert complexity == {row["complexity"]: str(row["runs"]) for row in expected["by_complexity"]}

    for by in ("intent", "worker", "lesson"):
        with server.client(admin_key) as api:
            grouped = api.get("/v1/metrics/report", params={"by": by}).json()["groups"]
        page = console.get("/console/", params={"range": "all", "by": by})
        assert page.status_code == 200
        # The tiles read the report without its levels beside the groups: the same figures.
        tiles = figures(page.text)
        for name in ("runs", "p50_ms", "p95_ms", "p99_ms", "cache_hit_rate"):
            assert float(tiles[name]) == expected[name], (by, name)
        assert '<tr data-group="low">' not in page.text
        shown_groups = re.findall(
            r'<tr data-group="([^"]+)">\s*<th scope="row">.*?</th>\s*'
            r'<td class="n" data-value="(\d+)">\d+</td>\s*<td class="n" data-value="([^"]*)">',
            page.text,
        )
        assert shown_groups == [
            (row["key"], str(row["runs"]), repr(row["p50_ms"])) for row in grouped
        ], by
    assert [key for key, *_ in shown_groups] == ["lesson.a", "lesson.b"]

    dated = console.get(
        "/console/", params={"range": "dates", "since": "2026-03-01", "until": "2026-03-02"}
    )
    assert figures(dated.text)["runs"] == "40"
    empty = console.get("/console/", params={"range": "dates", "since": "2026-03-02"})
    assert figures(empty.text)["runs"] == "0"
    assert "no runs" in empty.text
    bad = console.get("/console/", params={"range": "dates", "since": "March"})
    assert bad.status_code == 422
    assert "since: &#39;March&#39; is not a date" in bad.text


def test_the_charts_numbers_count_one_bucket_in_the_singular(
    store: Store, console: httpx.Client, fresh_namespace: str
) -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    metrics = MetricsRepository(store.sql_engine)  # any namespace: the console's own
    metrics.record(make_metric(start, namespace=fresh_namespace))
    one = console.get("/console/", params={"range": "all"})
    assert "(1 bucket)</summary>" in one.text
    metrics.record(make_metric(start + timedelta(hours=3), namespace=fresh_namespace))
    several = re.search(r"\((\d+) buckets\)</summary>", console.get("/console/?range=all").text)
    assert several is not None and int(several.group(1)) > 1


# -- knowledge documents ----------------------------------------------------------------------


def test_documents_list_search_read_and_delete(
    server: Server, console: httpx.Client, fresh_namespace: str
) -> None:
    with connect(database_url=server.database_url, redis_url="", namespace=fresh_namespace) as own:
        own.knowledge.add("Invoices are retried three times with backoff.", "docs/billing.md")
        own.knowledge.add("Search results are cached for <b>five</b> minutes.", "docs/search.md")
        own.knowledge.add("Runbook for the on-call engineer.", "ops/runbook.md")
    with connect(database_url=server.database_url, redis_url="", namespace="elsewhere") as other:
        other.knowledge.add("Invoices elsewhere.", "docs/other.md")

    listed = console.get("/console/documents")
    assert listed.status_code == 200
    sources = re.findall(r'<tr data-source="([^"]+)">', listed.text)
    assert sources == ["docs/billing.md", "docs/search.md", "ops/runbook.md"]
    by_prefix = console.get("/console/documents", params={"prefix": "docs/"})
    assert re.findall(r'<tr data-source="([^"]+)">', by_prefix.text) == [
        "docs/billing.md",
        "docs/search.md",
    ]
    found = console.get("/console/documents", params={"q": "invoices retried"})
    assert re.findall(r'<tr data-source="([^"]+)">', found.text) == ["docs/billing.md"]

    read = console.get("/console/documents/view", params={"source": "docs/search.md"})
    assert read.status_code == 200
    assert "&lt;b&gt;five&lt;/b&gt;" in read.text and "<b>five" not in read.text
    missing = console.get("/console/documents/view", params={"source": "docs/none.md"})
    assert missing.status_code == 404

    token = csrf_of(listed.text)
    forged = console.post(
        "/console/documents/delete", data={"csrf": "A" * 43, "source": "docs/search.md"}
    )
    assert forged.status_code == 403
    deleted = console.post(
        "/console/documents/delete", data={"csrf": token, "source": "docs/search.md"}
    )
    assert deleted.status_code == 303
    assert deleted.headers["location"] == "/console/documents?deleted=docs%2Fsearch.md"
    with connect(database_url=server.database_url, redis_url="", namespace=fresh_namespace) as own:
        assert [d.source for d in own.knowledge.list()] == ["docs/billing.md", "ops/runbook.md"]
    again = console.post(
        "/console/documents/delete", data={"csrf": token, "source": "docs/search.md"}
    )
    assert again.status_code == 404


# -- lesson usage -----------------------------------------------------------------------------


def test_usage_lists_each_lessons_runs_and_the_unused(
    server: Server, store: Store, console: httpx.Client, fresh_namespace: str
) -> None:
    used = new_lesson(store)
    idle = new_lesson(store)
    at = datetime(2026, 4, 1, tzinfo=UTC)
    own = tenant(server, fresh_namespace)
    own.metrics.record_many(
        [
            make_metric(
                at + timedelta(minutes=i),
                namespace=fresh_namespace,
                lessons_matched=2,
                lessons_included=1 if i < 3 else 0,
                trace=RunTrace(
                    lessons_matched=tuple(sorted((used.entity_id, idle.entity_id))),
                    lessons_included=(used.entity_id,) if i < 3 else (),
                ),
            )
            for i in range(5)
        ]
    )
    expected = own.metrics.lesson_stats()
    own.close()
    page = console.get("/console/usage", params={"range": "all"})
    assert page.status_code == 200
    rows = re.findall(
        r'<tr data-lesson="([^"]+)">.*?<td class="n">(\d+)</td>\s*<td class="n">(\d+)</td>',
        page.text,
        re.S,
    )
    assert rows == [
        (item.entity_id, str(item.runs_included), str(item.runs_matched))
        for item in expected.lessons
    ]
    assert (used.entity_id, "3", "5") in rows and (idle.entity_id, "0", "5") in rows
    unused = re.findall(r'<li data-lesson="([^"]+)">', page.text)
    assert unused == list(expected.unused)
    assert idle.entity_id in unused and used.entity_id not in unused
    assert "5 runs in this range." in page.text
    bad = console.get("/console/usage", params={"range": "forever"})
    assert bad.status_code == 422


# -- every namespace, for owners ------------------------------------------------------------


def test_an_owner_sees_every_namespaces_metrics_and_an_admin_only_its_own(
    server: Server,
    store: Store,
    console: httpx.Client,
    owner_console: httpx.Client,
    owner_key: str,
    fresh_namespace: str,
) -> None:
    lesson = new_lesson(store)
    # A day no other test records runs on, so the figures are these rows' alone.
    day = {"range": "dates", "since": "2031-05-01", "until": "2031-05-02"}
    at = datetime(2031, 5, 1, 9, tzinfo=UTC)
    elsewhere = f"{fresh_namespace}-b"
    with tenant(server, fresh_namespace) as own, tenant(server, elsewhere) as other:
        own.metrics.record_many(
            [make_metric(at + timedelta(minutes=i), namespace=fresh_namespace) for i in range(3)]
        )
        other.metrics.record_many(
            [
                make_metric(
                    at + timedelta(minutes=i),
                    namespace=elsewhere,
                    response_ms=500.0 + i,
                    lessons_matched=1,
                    lessons_included=1,
                    trace=RunTrace(
                        lessons_matched=(lesson.entity_id,), lessons_included=(lesson.entity_id,)
                    ),
                )
                for i in range(4)
            ]
        )
    every = {**day, "namespaces": "all"}
    with server.client(owner_key) as api:
        expected = api.get(
            "/v1/metrics/report",
            params={"all_namespaces": "true", "since": "2031-05-01", "until": "2031-05-02"},
        ).json()
    assert expected["runs"] == 7
    page = owner_console.get("/console/", params=every)
    assert page.status_code == 200
    shown = figures(page.text)
    assert int(shown["runs"]) == 7
    for name in ("p50_ms", "p95_ms", "p99_ms", "cache_hit_rate", "guard_failure_rate"):
        assert float(shown[name]) == expected[name], name
    assert "<strong>Every namespace</strong>" in page.text
    assert 'name="namespaces" value="all" checked' in page.text
    # Without the choice, the owner's own namespace, and the box offered unticked.
    mine = owner_console.get("/console/", params=day)
    assert figures(mine.text)["runs"] == "3"
    assert 'name="namespaces" value="all">' in mine.text
    usage = owner_console.get("/console/usage", params=every)
    assert usage.status_code == 200 and "7 runs in this range." in usage.text
    assert re.search(
        rf'<tr data-lesson="{re.escape(lesson.entity_id)}">.*?<td class="n">4</td>\s*'
        r'<td class="n">4</td>',
        usage.text,
        re.S,
    )
    own_usage = owner_console.get("/console/usage", params=day)
    assert "3 runs in this range." in own_usage.text
    assert f'data-lesson="{lesson.entity_id}"><td><a' not in own_usage.text.replace("\n", "")

    # An admin key: its namespace only, no box, and asking for every namespace is refused.
    admin_page = console.get("/console/", params=day)
    assert figures(admin_page.text)["runs"] == "3"
    assert 'name="namespaces"' not in admin_page.text
    for path in ("/console/", "/console/usage"):
        refused = console.get(path, params=every)
        assert refused.status_code == 403, path
        assert "every namespace needs an owner key" in refused.text
        assert 'data-figure="runs"' not in refused.text
    bad = owner_console.get("/console/", params={**day, "namespaces": "tenant-b"})
    assert bad.status_code == 422 and "namespaces: must be empty or" in bad.text
