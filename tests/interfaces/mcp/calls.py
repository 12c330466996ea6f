"""What a tool call answered, read the same way over stdio and over HTTP."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, TextContent


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
