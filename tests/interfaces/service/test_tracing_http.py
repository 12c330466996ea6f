"""Tracing in the HTTP service: a span per request, continuing the caller's trace, with the
runs it makes as its children; none of it when tracing is off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextstore.config import ContextEngineConfig, TracingConfig
from contextstore.engine.tracing import PHASES, RUN_SPAN
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.server import create_app
from contextstore.interfaces.web.settings import ServiceSettings
from tests.tracing import children, named

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[None]:
    """The ASGI lifespan around the block (the stores open and close), as a server runs it."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    task = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task


def serve(tmp_path: Path, tracing: bool) -> tuple[Any, str]:
    keys = tmp_path / "keys.json"
    key, _ = add_key(keys, "traced", "admin")
    store = ContextEngineConfig(
        database_url=f"sqlite:///{tmp_path / 'store.db'}",
        tracing=TracingConfig(enabled=tracing),
    )
    return create_app(ServiceSettings(keys_file=keys, store=store)), key


def requests(app: Any, key: str) -> list[int]:
    async def scenario() -> list[int]:
        async with running(app):
            transport = httpx.ASGITransport(app=app)
            headers = {
                "Authorization": f"Bearer {key}",
                "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            }
            async with httpx.AsyncClient(
                transport=transport, base_url="http://api.test", headers=headers
            ) as client:
                ran = await client.post("/v1/run", json={"query": "How do I fail over Postgres?"})
                missing = await client.get("/v1/lessons/no.such.lesson.0001")
                return [ran.status_code, missing.status_code]

    return asyncio.run(scenario())


def test_each_request_is_a_server_span_and_its_run_a_child(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app, key = serve(tmp_path, tracing=True)
    assert requests(app, key) == [200, 404]
    finished = spans.get_finished_spans()
    servers = [span for span in finished if span.kind.name == "SERVER"]
    assert [span.name for span in servers] == [
        "POST /v1/run",
        "GET /v1/lessons/{entity_id}",
    ]
    run_request, lesson_request = servers
    assert dict(run_request.attributes or {}) == {
        "http.request.method": "POST",
        "url.path": "/v1/run",
        "http.route": "/v1/run",
        "http.response.status_code": 200,
    }
    assert lesson_request.attributes is not None
    assert lesson_request.attributes["http.response.status_code"] == 404
    # The caller's trace goes on: same trace id, the caller's span as the parent.
    for span in servers:
        assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID
    (run,) = named(finished, RUN_SPAN)
    assert run.parent is not None and run_request.context is not None
    assert run.parent.span_id == run_request.context.span_id
    assert [span.name for span in children(finished, run)] == list(PHASES)
    assert run.attributes is not None and run.attributes["contextstore.namespace"] == "traced"
    assert not any(
        "fail over" in str(value) for span in finished for value in (span.attributes or {}).values()
    )


def test_off_the_service_makes_no_span(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    app, key = serve(tmp_path, tracing=False)
    assert requests(app, key) == [200, 404]
    assert spans.get_finished_spans() == ()
