"""The README's Integrations section runs as printed: each Python snippet in an empty
directory, and the desktop client's configuration starts a working MCP server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.slow  # each snippet starts an interpreter

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = README.read_text(encoding="utf-8").split("## Integrations", 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.DOTALL)


def run_python(code: str, cwd: Path) -> str:
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("CONTEXTSTORE_")
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("index", [0, 1], ids=["langchain", "llamaindex"])
def test_each_python_snippet_runs_in_an_empty_directory(index: int, tmp_path: Path) -> None:
    langchain, llamaindex = blocks("python")[:2]
    assert "langchain" in langchain and "llama_index" in llamaindex
    code = [langchain, llamaindex][index]
    assert run_python(code, tmp_path) == "['ops/failover.md#0']\n"
    assert (tmp_path / "contextstore.db").is_file()


def test_the_desktop_configuration_names_the_http_endpoint() -> None:
    [configuration] = blocks("json")
    remote = json.loads(configuration)["mcpServers"]["contextstore-fleet"]
    # The path and header tests/interfaces/mcp/test_http.py drives with the SDK's client.
    assert urlsplit(remote["url"]).path == "/mcp"
    assert remote["headers"]["Authorization"].startswith("Bearer csk_")


def test_the_langgraph_snippet_runs_in_an_empty_directory(tmp_path: Path) -> None:
    langgraph = blocks("python")[2]
    assert "langgraph" in langgraph
    assert run_python(langgraph, tmp_path) == "preferences\n"
    # A second process reads what the first one stored.
    assert run_python(langgraph, tmp_path) == "preferences\n"


def test_the_desktop_configuration_starts_the_server() -> None:
    [configuration] = blocks("json")
    server = json.loads(configuration)["mcpServers"]["contextstore"]
    assert (server["command"], server["args"]) == ("contextstore", ["mcp"])
    assert set(server["env"]) == {"CONTEXTSTORE_DATABASE_URL", "CONTEXTSTORE_NAMESPACE"}
    # The command and arguments are the ones tests/interfaces/mcp drives over stdio.
    command = Path(sys.executable).with_name(server["command"])
    help_text = subprocess.run(
        [str(command), *server["args"], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "Serve the MCP tools and resources on stdio" in help_text
