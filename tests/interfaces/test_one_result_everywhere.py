"""One run and one match, asked for every way there is — ``run --json`` / ``match --json``,
``/v1/run`` / ``/v1/match``, the MCP tools over HTTP and over stdio — answer the same JSON:
the same fields, nesting and values, apart from a run's ``TRANSPORT_FIELDS``."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from typer.testing import CliRunner

from contextstore.interfaces.cli import app
from contextstore.interfaces.result_schemas import MATCH_SCHEMA, RUN_SCHEMA, UTC_TIMESTAMP
from contextstore.interfaces.results import TRANSPORT_FIELDS
from tests.interfaces.service.server import Server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("clean_environment")]

QUERY = "How do I fail over the primary Postgres cluster?"
RUNBOOK = (
    "To fail over the primary Postgres cluster, promote the replica with the least "
    "replication lag, then point the service's connection string at it."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("everywhere")
    instance = Server(directory, f"sqlite:///{directory / 'store.db'}")
    instance.start()
    yield instance
    assert instance.stop() == 0, instance.log.read_text()


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    return json.loads(result.content[0].text)


@asynccontextmanager
async def over_http(server: Server, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60.0)
    transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
    async with http, Client(transport, mode="legacy") as client:
        yield client


@asynccontextmanager
async def over_stdio(server: Server, namespace: str) -> AsyncIterator[Client]:
    command = Path(sys.executable).with_name("contextstore")
    arguments = ["mcp", "--database-url", server.database_url, "--redis-url", ""]
    # The server runs the tree under test (PYTHONPATH), and the initialize handshake waits
    # for a server slow to import on a loaded machine, where discovery gives up after 10 s.
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
    parameters = StdioServerParameters(
        command=str(command), args=[*arguments, "--namespace", namespace], env=env
    )
    async with Client(parameters, mode="legacy") as client:
        yield client


def cli(*arguments: str) -> Any:
    result = CliRunner().invoke(app, list(arguments))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.asyncio
async def test_one_run_and_one_match_are_the_same_json_everywhere(server: Server) -> None:
    namespace, tag = f"ns-{uuid.uuid4().hex[:10]}", f"t{uuid.uuid4().hex[:8]}"
    admin_key = server.key(namespace, "owner")  # it writes lessons too
    with server.client(admin_key) as admin:
        document = {"source": "runbooks/failover.md", "text": RUNBOOK, "metadata": {"team": "ops"}}
        assert admin.post("/v1/documents", json=document).status_code == 201
        for entity, severity in (("ops.lag", "critical"), ("ops.page", "info")):
            lesson = {
                "entity_id": f"{entity}.{tag}",
                "injection_form": f"Mind {entity}.",
                "severity": severity,
                "status": "active",
                "applies_to": [f"tag:{tag}"],
            }
            created = admin.post("/v1/lessons", json=lesson)
            assert created.status_code == 201, created.text
            # Every timestamp the API writes is RFC 3339 in UTC with Z.
            assert jsonschema.Draft202012Validator({"pattern": UTC_TIMESTAMP}).is_valid(
                created.json()["created_at"]
            )

        runs: dict[str, Any] = {}
        matches: dict[str, Any] = {}
        # The CLI first: it is a process of its own, so its cache is cold like the server's.
        location = ["--database-url", server.database_url]
        runs["cli"] = cli(
            "run", QUERY, "--tag", tag, "--budget", "900", *location, "--redis-url", "",
            "--namespace", namespace, "--json",
        )  # fmt: skip
        matches["cli"] = cli("match", "--tag", tag, "--explain", *location, "--json")
        body = {"query": QUERY, "scope": {"tags": [tag]}, "override_budget": 900}
        runs["http"] = admin.post("/v1/run", json=body).json()
        match_body = {"scope": {"tags": [tag]}, "explain": True}
        matches["http"] = admin.post("/v1/match", json=match_body).json()
    run_arguments = {"query": QUERY, "tags": [tag], "budget": 900}
    async with over_http(server, server.key(namespace)) as client:
        runs["mcp-http"] = structured(await client.call_tool("build_context", run_arguments))
        matches["mcp-http"] = structured(
            await client.call_tool("match_lessons", {"tags": [tag], "explain": True})
        )
    async with over_stdio(server, namespace) as client:
        runs["mcp-stdio"] = structured(await client.call_tool("build_context", run_arguments))
        matches["mcp-stdio"] = structured(
            await client.call_tool("match_lessons", {"tags": [tag], "explain": True})
        )

    for data in runs.values():
        jsonschema.validate(data, RUN_SCHEMA)
    for data in matches.values():
        jsonschema.validate(data, MATCH_SCHEMA)
    # The server's engine answered MCP over HTTP from the cache /v1/run filled.
    assert {way: data["cache_hit"] for way, data in runs.items()} == {
        "cli": False,
        "http": False,
        "mcp-http": True,
        "mcp-stdio": False,
    }
    contexts = [
        {k: v for k, v in data.items() if k not in TRANSPORT_FIELDS} for data in runs.values()
    ]
    assert all(context == contexts[0] for context in contexts), contexts
    assert contexts[0]["lessons"]["included_count"] == 2
    assert [chunk["source"] for chunk in contexts[0]["chunks_used"]] == ["runbooks/failover.md"]
    assert contexts[0]["prompt"] == f"{contexts[0]['lesson_block']}\n\n{contexts[0]['context']}"
    assert all(data == matches["cli"] for data in matches.values()), matches
    assert [item["rank"] for item in matches["cli"]["explanation"]] == [1, 2]
