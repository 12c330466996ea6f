"""Reading the documentation for the tests: pages, their tables, the blocks marked for testing,
and the code objects the pages name (found wherever the package defines them)."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import textwrap
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import contextstore
from tests import REPO_ROOT

ROOT = REPO_ROOT
DOCS = ROOT / "docs"
README = ROOT / "README.md"

MARKED_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)<!-- test: (?P<kind>\w+) -->\n"
    r"(?P=indent)```\w*\n(?P<code>.*?)^(?P=indent)```$",
    re.MULTILINE | re.DOTALL,
)


def read(page: str) -> str:
    """A page of the site by its path under ``docs/`` (``README.md`` is the README)."""
    path = README if page == "README.md" else DOCS / page
    return path.read_text(encoding="utf-8")


def all_pages() -> list[str]:
    """Every Markdown page of the site, and the README."""
    return ["README.md", *(str(p.relative_to(DOCS)) for p in sorted(DOCS.rglob("*.md")))]


@dataclass(frozen=True)
class Marked:
    """A fenced block marked ``<!-- test: kind -->``, and where it is."""

    page: str
    kind: str
    code: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind} block {self.code.splitlines()[0]!r}"


def marked_blocks(kind: str) -> list[Marked]:
    """Every block marked for testing as ``kind``, in page order, dedented."""
    return [
        Marked(page, kind, textwrap.dedent(match["code"]))
        for page in all_pages()
        for match in MARKED_BLOCK.finditer(read(page))
        if match["kind"] == kind
    ]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of ``text``: each a list of rows (the header first), each a list
    of cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                current.append(cells(line))
        elif current:
            found.append(current)
            current = []
    return found


def table(page: str, *header: str) -> list[list[str]]:
    """The body rows of the one table of ``page`` whose header starts with ``header``."""
    matches = [t for t in tables(read(page)) if tuple(t[0][: len(header)]) == header]
    assert len(matches) == 1, f"{page}: {len(matches)} tables start with {header}"
    return matches[0][1:]


def code(cell: str) -> str:
    """The first `code` span of a table cell."""
    found = re.search(r"`([^`]+)`", cell)
    assert found is not None, f"no code in {cell!r}"
    return found.group(1)


@functools.cache
def modules() -> tuple[ModuleType, ...]:
    """Every module of the package (``__main__`` aside, which would run the command line)."""
    names = pkgutil.walk_packages(contextstore.__path__, "contextstore.")
    return (
        contextstore,
        *(importlib.import_module(m.name) for m in names if not m.name.endswith("__main__")),
    )


def find_code(name: str) -> Any:
    """The value the docs call ``name``: ``NAME`` (a module-level name), ``Class.attr`` or
    ``module.NAME`` (``module`` the last part of a module's dotted name). Module paths are
    not part of a name, so the docs survive code moving between modules; a name that means
    different values in different places is an error."""
    first, _, rest = name.partition(".")
    values: list[Any] = []
    for module in modules():
        namespace = vars(module)
        if not rest:
            if first in namespace:
                values.append(namespace[first])
            continue
        if module.__name__.rsplit(".", 1)[-1] == first and rest in namespace:
            values.append(namespace[rest])
        owner = namespace.get(first)
        if isinstance(owner, type) and hasattr(owner, rest):
            values.append(getattr(owner, rest))
    assert values, f"the docs name {name}, which the code does not define"
    distinct = [v for i, v in enumerate(values) if all(v is not w and v != w for w in values[:i])]
    assert len(distinct) == 1, f"{name} means several things in the code: {distinct}"
    return distinct[0]
