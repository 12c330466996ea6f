"""What the stdio and the HTTP MCP tests share: the runbook they search, how a tool call's
answer is read, and the checks that must hold over either transport."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client
from mcp_types import CallToolResult, TextContent

RUNBOOK = (
    "To fail over the primary Postgres cluster, promote the replica with the least "
    "replication lag, then point the service's connection string at it."
)
QUERY = "How do I fail over the primary Postgres cluster?"


def structured(result: CallToolResult) -> Any:
    """The structured result of a call that succeeded."""
    assert not result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    # The text a model reads and the structured result are the same JSON.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def tool_error(result: CallToolResult) -> str:
    """The text of a call that failed."""
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


async def check_bad_input_names_the_field(client: Client) -> None:
    """Bad tool input is a tool error naming the field, and the session survives it (the
    runbook is in the client's namespace)."""
    too_many = tool_error(await client.call_tool("search_knowledge", {"query": "x", "top_k": 500}))
    assert "top_k\n  Input should be less than or equal to 50" in too_many
    bad_filter = tool_error(
        await client.call_tool("build_context", {"query": QUERY, "filters": {"": 1}})
    )
    assert bad_filter == (
        "Error executing tool build_context: "
        "filters: key '' must be a non-empty string without quotes"
    )
    # The session survives both: the next call answers.
    data = structured(await client.call_tool("search_knowledge", {"query": "replica lag"}))
    assert [chunk["source"] for chunk in data["chunks"]] == ["runbooks/failover.md"]
