"""The examples of the docs run as printed: every block marked ``<!-- test: python -->``,
``cli`` or ``shell`` (the ``sql`` ones run in ``tests/sql/test_docs_sql.py``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docs.pages import ROOT, Marked, marked_blocks, read


def clean_environment() -> dict[str, str]:
    """The environment without the variables that would point an example elsewhere."""
    return {
        name: value for name, value in os.environ.items() if not name.startswith("CONTEXTSTORE_")
    }


def workspace(tmp_path: Path) -> Path:
    """An empty directory where the repository's relative paths (``contextstore/data/…``)
    still resolve, as they do for a reader in a checkout."""
    (tmp_path / "contextstore").symlink_to(ROOT / "contextstore", target_is_directory=True)
    return tmp_path


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def distinct(blocks: list[Marked]) -> list[Marked]:
    """One of each block: the README's example is also the getting-started page's."""
    return list({block.code: block for block in blocks}.values())


PYTHON = distinct(marked_blocks("python"))
CLI = marked_blocks("cli")
SHELL = marked_blocks("shell")


def test_the_marked_blocks_are_found() -> None:
    assert len(PYTHON) >= 2
    assert {block.page for block in CLI} >= {
        "guides/lessons.md",
        "guides/knowledge.md",
        "guides/metrics.md",
        "guides/operations.md",
    }
    assert SHELL


def readme_example() -> str:
    [block] = [block for block in marked_blocks("python") if block.page == "README.md"]
    return block.code


@pytest.mark.slow
def test_the_readme_example_works_in_an_empty_directory_twice_in_a_row(tmp_path: Path) -> None:
    runs = [run_python(readme_example(), tmp_path) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "[Lessons — durable guidance distilled from prior work; matched 1" in run.stdout
        assert "[Source: ops/postgres-failover.md]" in run.stdout
        assert run.stdout.rstrip().endswith("['ops/postgres-failover.md'] False")
    assert (tmp_path / "contextstore.db").is_file()
    assert readme_example() in read("getting-started.md")


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in PYTHON if b.code != readme_example()], ids=str)
def test_every_python_example_runs(block: Marked, tmp_path: Path) -> None:
    run = run_python(block.code, workspace(tmp_path))
    assert run.returncode == 0, run.stderr


def command_lines(code: str) -> list[str]:
    """The block's command lines: continuations joined, comments and blank lines dropped."""
    lines, pending = [], ""
    for raw in code.splitlines():
        pending += raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            lines.append(pending.strip())
        pending = ""
    return lines


@pytest.mark.parametrize("block", CLI, ids=str)
def test_every_command_line_example_runs(
    block: Marked, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextstore.interfaces.cli import app

    monkeypatch.chdir(workspace(tmp_path))
    for name in [name for name in os.environ if name.startswith("CONTEXTSTORE_")]:
        monkeypatch.delenv(name)
    runner = CliRunner()
    for line in command_lines(block.code):
        words = shlex.split(line, comments=True)
        assert words[0] == "contextstore", line
        redirect = None
        if len(words) > 2 and words[-2] == ">":
            words, redirect = words[:-2], words[-1]
        result = runner.invoke(app, words[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}\n{result.stderr}"
        if redirect is not None:
            Path(redirect).write_text(result.stdout, encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL, ids=str)
def test_every_shell_example_runs(block: Marked, tmp_path: Path) -> None:
    environment = clean_environment()
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=workspace(tmp_path),
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
