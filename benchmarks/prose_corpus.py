"""A large corpus of real prose, offline: the docstrings of the installed Python and packages.

Every paragraph of at least 60 characters of every module, class and function docstring in
the standard library and in site-packages, read with ``ast`` (nothing is imported, so nothing
runs), each one a document, duplicates dropped, in a stable order (files sorted by path). The
paragraphs are cached in the temporary directory (reading every file takes minutes on a busy
machine). Queries are natural
sentences of 8–30 words: the one-sentence summaries that open docstrings (``"Return the
number of items in the queue that are not yet processed."``), taken from documents that are
*not* in the corpus, so no query is a copy of a chunk.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["natural_queries", "prose_documents"]

_SENTENCE = re.compile(r"^[A-Z][^.!?]*[.?]$")


def _files() -> list[Path]:
    roots = {Path(sysconfig.get_paths()[key]) for key in ("stdlib", "purelib", "platlib")}
    found: set[Path] = set()
    for root in roots:
        found.update(p for p in root.rglob("*.py") if "test" not in p.as_posix().lower())
    return sorted(found)


def _docstrings() -> Iterator[tuple[str, str]]:
    for path in _files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, ValueError, UnicodeDecodeError, OSError, RecursionError):
            continue
        nodes = [tree, *ast.walk(tree)]
        for node in nodes:
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    name = getattr(node, "name", "")
                    yield f"{path.as_posix()}:{name}", doc


def _all(min_chars: int) -> list[tuple[str, str]]:
    version = ".".join(map(str, sys.version_info[:2]))
    cache = Path(tempfile.gettempdir()) / f"contextstore-prose-{version}-{min_chars}.jsonl"
    if cache.exists():
        return [tuple(json.loads(line)) for line in cache.read_text().splitlines()]  # type: ignore[misc]
    seen: set[str] = set()
    documents: list[tuple[str, str]] = []
    for source, doc in _docstrings():
        for paragraph in doc.split("\n\n"):
            text = " ".join(paragraph.split())
            if len(text) < min_chars or text in seen or "\x00" in text:
                continue
            seen.add(text)
            documents.append((f"{source}#{len(documents)}", text))
    cache.write_text("".join(json.dumps(d) + "\n" for d in documents))
    return documents


def prose_documents(
    chunks: int, passage_chars: int = 800
) -> tuple[list[tuple[str, str]], list[str]]:
    """(source, text) documents holding about ``chunks`` passages, and 8–30-word queries
    from paragraphs left out of them (every 25th paragraph)."""
    documents = [d for d in _all(40) if len(d[1]) >= 60 and "\x00" not in d[1]]
    kept: list[tuple[str, str]] = []
    queries: list[str] = []
    total = 0
    for number, (source, text) in enumerate(documents):
        if number % 25 == 24:
            summary = text
            if 8 <= len(summary.split()) <= 30 and _SENTENCE.match(summary):
                queries.append(summary)
            continue
        if total >= chunks:
            continue
        kept.append((source, text))
        total += max(1, -(-len(text) // passage_chars))
    return kept, queries


def natural_queries(queries: list[str], count: int) -> list[str]:
    """``count`` queries spread evenly over ``queries`` (stable)."""
    step = max(1, len(queries) // count)
    return queries[::step][:count]
