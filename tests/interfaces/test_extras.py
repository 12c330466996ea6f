"""The integrations are optional extras: ``import contextstore`` (and the command line) never
imports a framework, and a missing one is a ``MissingExtraError`` naming the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextstore.interfaces.apikeys import create_key_file

pytestmark = pytest.mark.slow  # each test starts an interpreter

FRAMEWORKS = ("mcp", "mcp_types", "langchain_core", "langgraph", "llama_index")

# Makes the frameworks uninstallable in a fresh interpreter, as if the extras were absent.
WITHOUT_FRAMEWORKS = f"""
import sys
from importlib.abc import MetaPathFinder

class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {FRAMEWORKS!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_contextstore_and_its_cli_imports_no_framework() -> None:
    result = python(
        f"""
        import sys
        import contextstore, contextstore.interfaces.cli, contextstore.interfaces.results
        import contextstore.interfaces.mcp, contextstore.interfaces.integrations
        import contextstore.integrations, contextstore.interfaces.server
        print(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


MISSING = [
    (
        "langchain",
        "The LangChain integration needs langchain-core, which is not installed: "
        "pip install 'contextstore[langchain]'",
    ),
    (
        "langgraph",
        "The LangGraph integration needs langgraph, which is not installed: "
        "pip install 'contextstore[langgraph]'",
    ),
    (
        "llamaindex",
        "The LlamaIndex integration needs llama-index-core, which is not installed: "
        "pip install 'contextstore[llamaindex]'",
    ),
]


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (f"contextstore.{place}.{name}", message)
        for name, message in MISSING
        for place in ("interfaces.integrations", "integrations")
    ],
)
def test_a_missing_framework_names_its_extra(module: str, message: str) -> None:
    result = python(
        WITHOUT_FRAMEWORKS
        + f"""
from contextstore import MissingExtraError
try:
    import {module}
except MissingExtraError as error:
    print(error)
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{message}\n"


def test_contextstore_mcp_without_the_sdk_is_one_error_line() -> None:
    result = python(
        WITHOUT_FRAMEWORKS
        + """
from contextstore.interfaces.cli import main
sys.argv = ["contextstore", "mcp", "--database-url", "sqlite://", "--redis-url", ""]
main()
"""
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: The MCP server needs mcp, which is not installed: pip install 'contextstore[mcp]'\n"
    )


@pytest.mark.parametrize(
    ("name", "framework"), [("langchain", "langchain_core"), ("llamaindex", "llama_index")]
)
def test_the_public_path_is_the_adapter_and_brings_its_framework_only(
    name: str, framework: str
) -> None:
    result = python(
        f"""
        import sys
        import contextstore.integrations.{name} as public
        import contextstore.interfaces.integrations.{name} as inner
        assert public.__all__ == inner.__all__
        assert all(getattr(public, n) is getattr(inner, n) for n in public.__all__)
        print(sorted({{m.split(".")[0] for m in sys.modules}} & set({FRAMEWORKS!r})))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{[framework]}\n"


def test_importtime_of_contextstore_lists_no_framework() -> None:
    """``python -X importtime -c 'import contextstore'``: every module the import loads, none
    of them a framework's."""
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "import contextstore, contextstore.integrations",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()[1:]]
    assert "contextstore.integrations" in loaded and len(loaded) > 50
    assert [name for name in loaded if name.split(".")[0] in FRAMEWORKS] == []


def test_serve_without_the_sdk_answers_mcp_with_404_naming_the_extra(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    create_key_file(keys)
    result = python(
        WITHOUT_FRAMEWORKS
        + f"""
import asyncio, httpx
from pathlib import Path
from contextstore.interfaces.server import create_app
from contextstore.interfaces.web.settings import ServiceSettings

async def main():
    app = create_app(ServiceSettings(keys_file=Path({str(keys)!r})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        answer = await c.post("/mcp", json={{}})
    print(answer.status_code, answer.json()["error"]["message"])

asyncio.run(main())
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "404 The MCP endpoint needs mcp, which is not installed: pip install 'contextstore[mcp]'\n"
    )
