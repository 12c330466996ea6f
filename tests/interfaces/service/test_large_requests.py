"""Requests too large for the real test server's body limit, in process (1 MiB and more).

``/v1/match`` with 70,001 tags is refused as ``/v1/run`` refuses it, and a JSON line over
the bound in ``/v1/documents/import`` is refused naming the line, with nothing written.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from contextstore.config import ContextEngineConfig
from contextstore.core.jsonl import MAX_LINE_BYTES
from contextstore.interfaces.apikeys import KeyRing, add_key
from contextstore.interfaces.service.app import build_api
from contextstore.interfaces.web.middleware import Authenticate, BodyLimit
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry


def responses(tmp_path: Path, requests: list[tuple[str, bytes]]) -> list[httpx.Response]:
    """Each ``(path, body)`` POSTed with an admin key to an API of a 32 MiB body limit."""
    keys = tmp_path / "keys.json"
    key, _ = add_key(keys, "ops", "admin")
    settings = ServiceSettings(
        keys_file=keys,
        max_body_bytes=32 * 1024 * 1024,
        store=ContextEngineConfig(database_url=f"sqlite:///{tmp_path / 'store.db'}"),
    )
    api = build_api(settings, Telemetry())
    app = Authenticate(BodyLimit(api, settings.max_body_bytes), KeyRing(keys))

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            api.router.lifespan_context(api),
            httpx.AsyncClient(transport=transport, base_url="http://api.test") as client,
        ):
            answers = [
                await client.post(path, content=body, headers=headers) for path, body in requests
            ]
            answers.append(await client.get("/v1/documents", headers=headers))
            return answers

    return asyncio.run(send())


def test_match_refuses_seventy_thousand_tags_and_an_import_an_overlong_line(
    tmp_path: Path,
) -> None:
    tags = json.dumps({"scope": {"tags": [f"t{i}" for i in range(70_001)]}}).encode()
    line = b'{"source": "b.md", "text": "' + b"x" * MAX_LINE_BYTES + b'"}\n'
    good = b'{"source": "a.md", "text": "fail over postgres"}\n'
    match, imported, documents = responses(
        tmp_path, [("/v1/match", tags), ("/v1/documents/import", good + line)]
    )
    assert match.status_code == 422
    assert match.json()["error"] == {
        "type": "invalid",
        "message": "holds 70001 values; the limit is 64",
        "field": "scope.tags",
    }
    assert imported.status_code == 422
    assert imported.json()["error"]["field"] == "line 2"
    assert documents.status_code == 200 and documents.json() == []
