"""The site builds, and its parts are complete: every decision record listed, every public
name in the reference, every README link alive."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import contextstore
from tests.docs.pages import DOCS, README, ROOT, all_pages, read

QUICK_START = [
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && contextstore demo",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest",
]


@pytest.mark.slow
def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "reference" / "engine" / "index.html").is_file()
    # No web fonts: nothing in the built site points at a font service.
    assert "fonts.googleapis.com" not in (tmp_path / "index.html").read_text(encoding="utf-8")


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.DOTALL)
    assert blocks[:2] == QUICK_START
    # .ci/run runs the README's test command word for word.
    assert QUICK_START[1].replace("pip install", "pip install -q") in (
        ROOT / ".ci" / "run"
    ).read_text(encoding="utf-8")


LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#([\w-]+))?\)")


@pytest.mark.parametrize("page", all_pages())
def test_every_link_to_a_page_finds_it(page: str) -> None:
    base = ROOT if page == "README.md" else (DOCS / page).parent
    for target, anchor in LINK.findall(read(page)):
        path = (base / target).resolve()
        assert path.is_file(), f"{page} links to {target}"
        if anchor:
            text = path.read_text(encoding="utf-8")
            assert f"{{#{anchor}}}" in text, f"{page} links to {target}#{anchor}"


# Named by the docs but not in a checkout: the wheel carries the migrations inside the
# package, and a benchmark run writes its results.
NOT_IN_A_CHECKOUT = {"contextstore/migrations/", "benchmarks/results/latest.md"}
REPOSITORY_PATH = re.compile(r"`((?:contextstore|tests|migrations|benchmarks|docs)/[^`*<>]*)`")


@pytest.mark.parametrize("page", all_pages())
def test_every_repository_path_named_exists(page: str) -> None:
    for path in REPOSITORY_PATH.findall(read(page)):
        if path not in NOT_IN_A_CHECKOUT:
            assert (ROOT / path).exists(), f"{page} names {path}"


def test_every_module_path_named_imports() -> None:
    import importlib

    for page in all_pages():
        for module, attribute in re.findall(r"`(contextstore(?:\.\w+)+):(\w+)`", read(page)):
            assert hasattr(importlib.import_module(module), attribute), (page, module)


def decision_records() -> list[Path]:
    return sorted((DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))


def test_the_decision_records_are_numbered_and_all_listed() -> None:
    records = decision_records()
    numbers = [int(record.name[:4]) for record in records]
    # Unique and rising from 0001; numbers are handed out in ranges to work done side by
    # side, so a range's unused numbers may stay free.
    assert numbers[0] == 1 and all(a < b for a, b in itertools.pairwise(numbers)), numbers
    index = read("decisions/index.md")
    for record in records:
        title = record.read_text(encoding="utf-8").splitlines()[0]
        number, _, name = title.removeprefix("# ").partition(". ")
        assert number == record.name[:4], record.name
        assert f"| [{number}]({record.name}) | {name} |" in index, record.name
        for heading in ("## Context", "## Decision", "## Consequences"):
            assert heading in record.read_text(encoding="utf-8"), (record.name, heading)


def test_every_public_name_is_in_the_reference() -> None:
    directives = [
        name
        for page in sorted((DOCS / "reference").glob("*.md"))
        for name in re.findall(r"^::: contextstore\.(\w+)$", page.read_text(encoding="utf-8"), re.M)
    ]
    assert len(directives) == len(set(directives))
    assert set(directives) == set(contextstore.__all__) - {"__version__"}
    index = read("reference/index.md")
    for name in directives:
        assert f"`{name}`" in index, name


def test_no_file_keeps_a_merge_conflict() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    marker = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)
    conflicted = [
        name
        for name in tracked
        if name.endswith((".py", ".md", ".toml", ".yml", ".html", ".sql", ".lua", ".ini"))
        and marker.search((ROOT / name).read_text(encoding="utf-8"))
    ]
    assert conflicted == []
