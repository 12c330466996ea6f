"""``contextstore mcp`` as a desktop client runs it: a real subprocess on a temporary SQLite
database, driven by the MCP SDK's own client over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from contextstore import LessonRecord, Scope, connect
from contextstore.interfaces.cli import app
from contextstore.interfaces.result_schemas import (
    DOCUMENT_SCHEMA,
    LESSON_SCHEMA,
    MATCH_SCHEMA,
    RUN_SCHEMA,
    SEARCH_SCHEMA,
)
from contextstore.interfaces.results import run_json
from tests.interfaces.mcp.calls import (
    QUERY,
    RUNBOOK,
    check_bad_input_names_the_field,
    structured,
    tool_error,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("clean_environment")]


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    with connect(database_url=url, redis_url="") as store:
        store.lessons.add(
            LessonRecord(
                "ops.failover", "Check replica lag first.", "critical", "active", ("tag:ops",)
            )
        )
        store.knowledge.add(RUNBOOK, "runbooks/failover.md", {"team": "ops"})
    return url


@asynccontextmanager
async def serving(
    database_url: str, *options: str, env: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """A client of a fresh ``contextstore mcp`` process (entered and left in one task, as
    the SDK's task groups require: a fixture's teardown would run in another)."""
    command = Path(sys.executable).with_name("contextstore")
    # The server runs the code under test when it is on PYTHONPATH (a working tree beside an
    # installed copy); the SDK passes only a few variables on by itself.
    if os.environ.get("PYTHONPATH"):
        env = {"PYTHONPATH": os.environ["PYTHONPATH"], **(env or {})}
    server = StdioServerParameters(
        command=str(command),
        args=["mcp", "--database-url", database_url, "--redis-url", "", *options],
        env=env,
    )
    # The initialize handshake: the discovery probe gives up after 10 s, which a server
    # starting on a loaded machine can take just to import.
    async with Client(server, mode="legacy") as connected:
        yield connected


@pytest.mark.asyncio
async def test_lists_the_tools_with_their_limits(database_url: str) -> None:
    async with serving(database_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == [
            "add_document",
            "build_context",
            "delete_document",
            "get_document",
            "match_lessons",
            "propose_lesson",
            "search_knowledge",
        ]
        search = tools["search_knowledge"].input_schema["properties"]
        assert (search["top_k"]["minimum"], search["top_k"]["maximum"]) == (1, 50)
        assert search["query"]["maxLength"] == 8000
        assert tools["build_context"].input_schema["required"] == ["query"]


@pytest.mark.asyncio
async def test_build_context_gives_the_prompt_lessons_first(database_url: str) -> None:
    async with serving(database_url) as client:
        data = structured(
            await client.call_tool("build_context", {"query": QUERY, "tags": ["ops"]})
        )
        jsonschema.validate(data, RUN_SCHEMA)
        assert data["lessons"]["included"] == [
            {"entity_id": "ops.failover", "injection_form": "Check replica lag first."}
        ]
        assert data["prompt"] == f"{data['lesson_block']}\n\n{data['context']}"
        assert [chunk["source"] for chunk in data["chunks_used"]] == ["runbooks/failover.md"]
        assert data["cache_hit"] is False
        again = structured(
            await client.call_tool("build_context", {"query": QUERY, "tags": ["ops"]})
        )
        assert again["cache_hit"] is True and again["prompt"] == data["prompt"]


@pytest.mark.asyncio
async def test_match_lessons_explains_on_request(database_url: str) -> None:
    async with serving(database_url) as client:
        plain = structured(await client.call_tool("match_lessons", {"tags": ["ops"]}))
        jsonschema.validate(plain, MATCH_SCHEMA)
        assert plain["explanation"] is None
        explained = structured(
            await client.call_tool("match_lessons", {"tags": ["ops"], "explain": True})
        )
        jsonschema.validate(explained, MATCH_SCHEMA)
        assert [(e["entity_id"], e["rank"]) for e in explained["explanation"]] == [
            ("ops.failover", 1)
        ]


@pytest.mark.asyncio
async def test_search_add_get_delete_a_document(database_url: str) -> None:
    async with serving(database_url) as client:
        added = structured(
            await client.call_tool(
                "add_document",
                {
                    "source": "runbooks/dns.md",
                    "text": "Flush the resolver cache after changing a DNS record.",
                    "metadata": {"team": "net"},
                },
            )
        )
        jsonschema.validate(added, DOCUMENT_SCHEMA)
        assert (added["source"], added["chunk_count"]) == ("runbooks/dns.md", 1)
        found = structured(
            await client.call_tool(
                "search_knowledge", {"query": "resolver cache DNS", "filters": {"team": "net"}}
            )
        )
        jsonschema.validate(found, SEARCH_SCHEMA)
        assert [chunk["source"] for chunk in found["chunks"]] == ["runbooks/dns.md"]
        got = structured(await client.call_tool("get_document", {"source": "runbooks/dns.md"}))
        assert got == added
        resource = await client.read_resource("document://runbooks/dns.md")
        assert json.loads(resource.contents[0].text) == added  # type: ignore[union-attr]
        deleted = structured(
            await client.call_tool("delete_document", {"source": "runbooks/dns.md"})
        )
        assert deleted == {"deleted": "runbooks/dns.md"}
        missing = tool_error(await client.call_tool("get_document", {"source": "runbooks/dns.md"}))
        assert missing == (
            "Error executing tool get_document: "
            "no document 'runbooks/dns.md' in namespace 'default'"
        )


@pytest.mark.asyncio
async def test_bad_input_is_a_tool_error_naming_the_field(database_url: str) -> None:
    async with serving(database_url) as client:
        await check_bad_input_names_the_field(client)


@pytest.mark.asyncio
async def test_a_proposed_lesson_waits_for_activation(database_url: str) -> None:
    async with serving(database_url) as client:
        proposal = {
            "entity_id": "ops.dns.flush",
            "injection_form": "Flush the resolver cache after a DNS change.",
            "applies_to": ["tag:ops"],
            "evidence": {"query": "Why do clients still see the old address?"},
        }
        proposed = structured(await client.call_tool("propose_lesson", proposal))
        jsonschema.validate(proposed, LESSON_SCHEMA)
        assert proposed["status"] == "proposed"
        before = structured(
            await client.call_tool("build_context", {"query": QUERY, "tags": ["ops"]})
        )
        assert [item["entity_id"] for item in before["lessons"]["included"]] == ["ops.failover"]
        with connect(database_url=database_url, redis_url="") as store:
            store.lessons.activate("ops.dns.flush")
            assert store.lessons.history("ops.dns.flush")[0].actor.startswith("mcp:")
        after = structured(
            await client.call_tool("build_context", {"query": QUERY, "tags": ["ops"]})
        )
        assert sorted(item["entity_id"] for item in after["lessons"]["included"]) == [
            "ops.dns.flush",
            "ops.failover",
        ]
        resource = await client.read_resource("lesson://ops.dns.flush")
        assert json.loads(resource.contents[0].text)["status"] == "active"  # type: ignore[union-attr]
        duplicate = tool_error(await client.call_tool("propose_lesson", proposal))
        assert duplicate == (
            "Error executing tool propose_lesson: entity_id: lesson 'ops.dns.flush' already exists"
        )
        twin = tool_error(
            await client.call_tool("propose_lesson", {**proposal, "entity_id": "ops.dns.again"})
        )
        assert twin.startswith(
            "Error executing tool propose_lesson: injection_form: lesson 'ops.dns.flush' "
            "already says this for the same scope keys"
        )
        unfounded = {**proposal, "entity_id": "ops.dns.other", "injection_form": "Other."}
        without = tool_error(
            await client.call_tool("propose_lesson", {**unfounded, "evidence": None})
        )
        assert without.startswith("Error executing tool propose_lesson: evidence: must name")
        with connect(database_url=database_url, redis_url="") as store:
            store.lessons.set_proposal_limit(1)
        capped = tool_error(await client.call_tool("propose_lesson", unfounded))
        assert capped.startswith(
            "Error executing tool propose_lesson: namespace 'default' may propose at most 1"
        )
        # The session lives on.
        assert structured(
            await client.call_tool("get_document", {"source": "runbooks/failover.md"})
        )


@pytest.mark.asyncio
async def test_the_prompt_puts_the_lesson_block_before_the_question(database_url: str) -> None:
    async with serving(database_url) as client:
        prompt = await client.get_prompt("answer_with_context", {"question": QUERY, "tags": "ops"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert text.startswith("[Lessons — durable guidance distilled from prior work; matched 1")
        assert text.index("Check replica lag first.") < text.index(RUNBOOK[:40])
        assert text.endswith(f"\n\nQuestion: {QUERY}")


@pytest.mark.asyncio
async def test_build_context_is_the_run_of_the_library_and_the_shape_of_the_cli(
    database_url: str,
) -> None:
    """One run, three ways in: the MCP tool, the library and ``run --json`` agree on every
    field name and nesting; the tool and the library on every value but the timing."""
    async with serving(database_url) as client:
        arguments = {"query": QUERY, "tags": ["ops"], "budget": 900}
        served = structured(await client.call_tool("build_context", arguments))
    with connect(database_url=database_url, redis_url="") as store:
        result = store.engine().run(QUERY, scope=Scope(tags=("ops",)), override_budget=900)
    library = run_json(result)
    assert {**served, "pipeline_ms": 0} == {**library, "pipeline_ms": 0}
    cli = CliRunner().invoke(
        app,
        [
            "run",
            QUERY,
            "--tag",
            "ops",
            "--budget",
            "900",
            "--database-url",
            database_url,
            "--redis-url",
            "",
            "--json",
        ],
    )
    assert cli.exit_code == 0, cli.output
    assert key_paths(json.loads(cli.stdout)) == key_paths(served)


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every field name with its nesting (``lessons.included[].entity_id``); a chunk's
    metadata is the document's own, not part of the shape."""
    if isinstance(value, dict):
        paths = set()
        for key, item in value.items():
            inner = set() if key == "metadata" else key_paths(item, f"{prefix}{key}.")
            paths |= {f"{prefix}{key}"} | inner
        return paths
    if isinstance(value, list):
        return set().union(*(key_paths(item, f"{prefix}[].") for item in value))
    return set()


@pytest.mark.asyncio
@pytest.mark.parametrize(("variable", "flag", "target"), [("x", None, "x"), ("y", "x", "x")])
async def test_the_namespace_is_the_variable_unless_the_flag_is_given(
    database_url: str, variable: str, flag: str | None, target: str
) -> None:
    options = ["--namespace", f"ns-{flag}"] if flag else []
    environment = {"CONTEXTSTORE_NAMESPACE": f"ns-{variable}"}
    async with serving(database_url, *options, env=environment) as client:
        arguments = {"source": "served.md", "text": "Written through the MCP server."}
        structured(await client.call_tool("add_document", arguments))
    for namespace in ("ns-x", "ns-y", "default"):
        with connect(database_url=database_url, redis_url="", namespace=namespace) as store:
            sources = [document.source for document in store.knowledge.list()]
        expected = {"ns-" + target: ["served.md"], "default": ["runbooks/failover.md"]}
        assert sources == expected.get(namespace, []), namespace
