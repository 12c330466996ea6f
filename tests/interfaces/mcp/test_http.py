"""``/mcp`` on a real ``contextstore serve`` process, driven by the MCP SDK's own client over
streamable HTTP: the API's keys, namespaces and roles, the stdio server's tools."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import jsonschema
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from contextstore.interfaces.result_schemas import LESSON_SCHEMA, RUN_SCHEMA
from tests.interfaces.mcp.calls import (
    QUERY,
    RUNBOOK,
    check_bad_input_names_the_field,
    structured,
    tool_error,
)
from tests.interfaces.service.conftest import BACKENDS, running_server
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

ADMIN_ONLY = "this tool needs an admin key; this key's role is agent"
TOOLS = [
    "add_document",
    "build_context",
    "delete_document",
    "get_document",
    "match_lessons",
    "propose_lesson",
    "search_knowledge",
]


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory: Path = tmp_path_factory.mktemp(f"mcp-{request.param}")
    with running_server(request, directory) as instance:
        yield instance


@pytest.fixture
def namespace(server: Server) -> str:
    """A namespace of its own with the runbook in it (added through the HTTP API)."""
    name = f"ns-{uuid.uuid4().hex[:10]}"
    with server.client(server.key(name, "admin")) as admin:
        document = {"source": "runbooks/failover.md", "text": RUNBOOK, "metadata": {}}
        assert admin.post("/v1/documents", json=document).status_code == 201
    return name


@asynccontextmanager
async def connected(server: Server, key: str | None, mode: str = "legacy") -> AsyncIterator[Client]:
    """An MCP client of ``/mcp`` sending ``key`` as its bearer token."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60.0)
    # The initialize handshake: discovery gives up after 10 s, which a loaded machine can take.
    transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode) as client:
        yield client


def lesson_id(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["legacy", "auto"])  # "auto": the modern protocol's discovery
async def test_an_agent_key_lists_the_tools_and_builds_a_context(
    server: Server, namespace: str, mode: str
) -> None:
    async with connected(server, server.key(namespace), mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == TOOLS
        search = tools["search_knowledge"].input_schema["properties"]
        assert (search["top_k"]["minimum"], search["top_k"]["maximum"]) == (1, 50)
        assert search["filters"]["anyOf"][0]["maxProperties"] == 32
        proposal = tools["propose_lesson"].input_schema["properties"]
        assert proposal["injection_form"]["maxLength"] == 320
        # The output schema is the run's shape, prompt first.
        assert list(tools["build_context"].output_schema["properties"])[:3] == [  # type: ignore[index]
            "prompt",
            "lesson_block",
            "context",
        ]
        data = structured(await client.call_tool("build_context", {"query": QUERY}))
        jsonschema.validate(data, RUN_SCHEMA)
        assert [chunk["source"] for chunk in data["chunks_used"]] == ["runbooks/failover.md"]
        assert data["prompt"] == data["context"]  # no lesson applies: the context alone
        resource = await client.read_resource("document://runbooks/failover.md")
        assert json.loads(resource.contents[0].text)["passages"] == [RUNBOOK]  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_a_key_reaches_its_own_namespace_only(server: Server, namespace: str) -> None:
    other = f"ns-{uuid.uuid4().hex[:10]}"
    async with connected(server, server.key(other, "admin")) as client:
        added = {"source": "other.md", "text": "Only in the other namespace."}
        structured(await client.call_tool("add_document", added))
        found = structured(await client.call_tool("search_knowledge", {"query": RUNBOOK}))
        assert [chunk["source"] for chunk in found["chunks"]] == []
    async with connected(server, server.key(namespace)) as client:
        missing = tool_error(await client.call_tool("get_document", {"source": "other.md"}))
        assert missing == (
            f"Error executing tool get_document: no document 'other.md' in namespace '{namespace}'"
        )


@pytest.mark.asyncio
async def test_a_proposal_is_inert_until_an_owner_activates_it(
    server: Server, namespace: str
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    entity = lesson_id("ops.dns")
    key = server.key(namespace)
    proposal = {
        "entity_id": entity,
        "injection_form": "Flush the resolver cache after a DNS change.",
        "applies_to": [f"tag:{tag}"],
        "evidence": {"query": QUERY},
    }
    async with connected(server, key) as client:
        proposed = structured(await client.call_tool("propose_lesson", proposal))
        jsonschema.validate(proposed, LESSON_SCHEMA)
        assert proposed["status"] == "proposed"
        before = structured(
            await client.call_tool("build_context", {"query": QUERY, "tags": [tag]})
        )
        assert before["lessons"]["included"] == []
    with server.client(server.key(namespace, "owner")) as owner:  # lesson writes are owners'
        assert owner.post(f"/v1/lessons/{entity}/activate").status_code == 200
        history = owner.get(f"/v1/lessons/{entity}/history").json()
    assert history[0]["actor"] == f"api:{key.split('_')[1]}"  # the proposing key
    async with connected(server, key) as client:
        after = structured(await client.call_tool("build_context", {"query": QUERY, "tags": [tag]}))
        assert after["lessons"]["included"] == [
            {"entity_id": entity, "injection_form": proposal["injection_form"]}
        ]
        assert after["prompt"] == f"{after['lesson_block']}\n\n{after['context']}"
        resource = await client.read_resource(f"lesson://{entity}")
        assert json.loads(resource.contents[0].text)["status"] == "active"  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_an_agent_key_may_not_write_documents(server: Server, namespace: str) -> None:
    async with connected(server, server.key(namespace)) as client:
        added = {"source": "agent.md", "text": "Written by an agent."}
        refused = tool_error(await client.call_tool("add_document", added))
        assert refused == f"Error executing tool add_document: {ADMIN_ONLY}"
        deleted = {"source": "runbooks/failover.md"}
        refused = tool_error(await client.call_tool("delete_document", deleted))
        assert refused == f"Error executing tool delete_document: {ADMIN_ONLY}"
    with server.client(server.key(namespace, "admin")) as admin:
        sources = [document["source"] for document in admin.get("/v1/documents").json()]
    assert sources == ["runbooks/failover.md"]


@pytest.mark.asyncio
async def test_bad_input_is_a_tool_error_and_the_session_lives(
    server: Server, namespace: str
) -> None:
    async with connected(server, server.key(namespace)) as client:
        await check_bad_input_names_the_field(client)


def refusal(error: BaseException) -> str:
    """The MCP error a client raised, found inside the task groups' exception groups."""
    while isinstance(error, BaseExceptionGroup):
        [error] = error.exceptions
    return str(error)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "an API key is required: Authorization: Bearer <key>"),
        ("csk_000000000000_" + "x" * 43, "the API key is not valid"),
    ],
    ids=["no key", "unknown key"],
)
async def test_a_wrong_key_is_refused_with_401(
    server: Server, key: str | None, message: str
) -> None:
    with pytest.raises(BaseException) as raised:
        async with connected(server, key) as client:
            await client.list_tools()
    assert refusal(raised.value) == message
    answer = httpx.post(f"{server.url}/mcp", json={}, headers={"Authorization": f"Bearer {key}"})
    assert (answer.status_code, answer.headers["www-authenticate"]) == (401, "Bearer")
    assert answer.json()["error"]["message"] == "the API key is not valid"
