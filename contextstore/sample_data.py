"""Sample data shipped with the package: a small knowledge base, lessons and demo queries.

The data describe the agent fleet of "Northwind Cloud", a fictional managed application
platform with three agent roles (support, ops on-call, coding) in three regions (eu-west,
us-east, me-central), in English and Arabic. The CLI demo, the benchmarks and the tests use
them; they are also a worked example of the file formats:

* ``data/corpus.jsonl``: one document per line,
  ``{"source": ..., "text": ..., "metadata": {"team": ..., "kind": ..., "lang": ...}}``.
* ``data/lessons.jsonl``: lessons in ``LessonRecord.to_json()`` form (``read_jsonl`` reads it).
* ``data/demo_queries.json``: a list of ``{"query", "tags", "entity_ids", "filters"}``.

The demo's knowledge base is larger than the fleet's own documents: ``demo_documents`` adds
Python's reference prose (``reference_documents``: the language reference's topics and the
docstrings of the standard library, about 1,200 documents and 1 MB of text), which ships with
every Python, so searches run over a knowledge base of a realistic size, offline.
``DEMO_KNOWLEDGE`` names the analyzer and embedder the demo's namespace uses: the
configuration that answers the sample questions best (docs/benchmarks-retrieval.md).

Files are read with ``importlib.resources``, so they work from a wheel or a zip as well as
from a checkout. Every loader returns fresh objects; callers may mutate what they get.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from contextstore.core.lessons import LessonRecord, read_jsonl
from contextstore.core.matching import Scope
from contextstore.core.retrieval import EmbedFn, InMemoryRetriever

__all__ = [
    "DEMO_KNOWLEDGE",
    "DemoQuery",
    "KnowledgeChoice",
    "corpus_lines",
    "demo_corpus_lines",
    "demo_documents",
    "load_corpus",
    "load_demo_queries",
    "load_lessons",
    "reference_documents",
    "sample_retriever",
]


@dataclass(frozen=True)
class KnowledgeChoice:
    """A namespace's retrieval configuration by name: an analyzer and an embedder."""

    analyzer: str
    embedder: str


DEMO_KNOWLEDGE = KnowledgeChoice(analyzer="english", embedder="wordllama")
"""What the demo's namespace searches with: the best answers on both benchmark collections and
on the sample questions (hybrid BM25 with ``english`` fused with WordLlama cosine)."""


@dataclass(frozen=True)
class DemoQuery:
    """One demo request: the query, the asking agent's scope, optional retrieval filters."""

    query: str
    tags: tuple[str, ...] = ()
    entity_ids: tuple[str, ...] = ()
    filters: Mapping[str, Any] | None = None

    @property
    def scope(self) -> Scope:
        """The agent scope for the lesson matcher."""
        return Scope(entity_ids=self.entity_ids, tags=self.tags)


def _read_text(name: str) -> str:
    return resources.files("contextstore").joinpath("data", name).read_text(encoding="utf-8")


def load_corpus() -> list[dict[str, Any]]:
    """The sample documents, in file order: dicts with ``source``, ``text``, ``metadata``."""
    return [json.loads(line) for line in _read_text("corpus.jsonl").splitlines() if line.strip()]


def corpus_lines() -> list[str]:
    """The sample corpus as its JSON Lines, for ``store.knowledge.import_jsonl``."""
    return [line for line in _read_text("corpus.jsonl").splitlines() if line.strip()]


def load_lessons() -> list[LessonRecord]:
    """The sample lessons, validated (``ValidationError`` naming the line if the file is bad)."""
    return list(read_jsonl(_read_text("lessons.jsonl").splitlines()))


def load_demo_queries() -> list[DemoQuery]:
    """The demo queries, in file order (some repeat on purpose, to show cache hits)."""
    return [
        DemoQuery(
            query=item["query"],
            tags=tuple(item.get("tags") or ()),
            entity_ids=tuple(item.get("entity_ids") or ()),
            filters=item.get("filters"),
        )
        for item in json.loads(_read_text("demo_queries.json"))
    ]


def sample_retriever(
    embed_fn: EmbedFn | None = None,
    *,
    analyzer: str = "simple",
    documents: list[dict[str, Any]] | None = None,
) -> InMemoryRetriever:
    """An ``InMemoryRetriever`` loaded with ``documents`` (default: the sample corpus).

    ``embed_fn=None`` gives BM25 ranking only; pass ``HashingEmbedder()`` (or any text →
    vector callable) for hybrid ranking. ``sample_retriever(embedder, analyzer="english",
    documents=demo_documents())`` is the demo's knowledge base in memory.
    """
    retriever = InMemoryRetriever(embed_fn, analyzer=analyzer)
    retriever.add_documents(load_corpus() if documents is None else documents)
    return retriever


# Python's reference prose: modules of the standard library that import on every platform
# without side effects (no GUI, nothing printed), and the packages walked for submodules.
_REFERENCE_MODULES = (
    "abc", "argparse", "array", "ast", "base64", "binascii", "bisect", "bz2", "calendar",
    "cmath", "codecs", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "dis", "doctest", "enum", "filecmp", "fnmatch", "fractions",
    "functools", "gc", "getpass", "gettext", "glob", "graphlib", "gzip", "hashlib", "heapq",
    "hmac", "inspect", "io", "ipaddress", "itertools", "locale", "lzma", "math", "mimetypes",
    "numbers", "operator", "os", "os.path", "pathlib", "pickle", "platform", "pprint", "queue",
    "random", "re", "reprlib", "sched", "secrets", "select", "selectors", "shlex", "shutil",
    "signal", "smtplib", "socket", "ssl", "stat", "statistics", "string", "struct",
    "subprocess", "sys", "tarfile", "tempfile", "textwrap", "threading", "time", "timeit",
    "tokenize", "trace", "traceback", "types", "typing", "unicodedata", "uuid", "warnings",
    "weakref", "zipfile", "zipimport", "zlib",
)  # fmt: skip
_REFERENCE_PACKAGES = (
    "asyncio", "collections", "concurrent", "email", "html", "http", "importlib", "json",
    "logging", "multiprocessing", "sqlite3", "unittest", "urllib", "wsgiref", "xml", "xmlrpc",
)  # fmt: skip
_REFERENCE_METADATA = {"team": "coding", "kind": "reference", "lang": "en"}
_MIN_REFERENCE_CHARS = 200


def _reference_module_names() -> Iterator[str]:
    yield from _REFERENCE_MODULES
    for package in _REFERENCE_PACKAGES:
        try:
            root = importlib.import_module(package)
        except ImportError:  # pragma: no cover - every package listed is in every CPython
            continue
        yield package
        for info in pkgutil.walk_packages(root.__path__, f"{package}.", onerror=lambda _: None):
            if not any(part.startswith(("_", "test")) for part in info.name.split(".")):
                yield info.name


def _documented(module_name: str) -> Iterator[tuple[str, object]]:
    """The module, its public functions and classes, and their public methods."""
    try:
        module = importlib.import_module(module_name)
    except Exception:  # a module missing on this platform (a Windows event loop) is left out
        return
    yield module_name, module
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or getattr(value, "__module__", None) != module_name:
            continue
        if inspect.isclass(value):
            yield f"{module_name}.{name}", value
            for attribute, member in sorted(vars(value).items()):
                if not attribute.startswith("_") and inspect.isfunction(member):
                    yield f"{module_name}.{name}.{attribute}", member
        elif inspect.isfunction(value) or inspect.isbuiltin(value):
            yield f"{module_name}.{name}", value


def reference_documents() -> list[dict[str, Any]]:
    """Python's reference prose as knowledge documents, in a stable order.

    The language reference's topics (``pydoc_data``, as ``help()`` shows them) under
    ``reference/python-language/<topic>``, then every docstring of at least 200 characters of
    the standard library modules above (the module, its public functions and classes, their
    public methods) under ``reference/python/<qualified name>``; a text seen before is skipped.
    Metadata ``{"team": "coding", "kind": "reference", "lang": "en"}``. The text follows the
    running Python's version.
    """
    from pydoc_data.topics import topics

    documents: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(source: str, text: str | None) -> None:
        if text and len(text) >= _MIN_REFERENCE_CHARS and text not in seen:
            seen.add(text)
            documents.append({"source": source, "text": text, "metadata": _REFERENCE_METADATA})

    for topic in sorted(topics):
        add(f"reference/python-language/{topic}", topics[topic].strip())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deprecated module's import warning is not news
        for module_name in dict.fromkeys(_reference_module_names()):
            for source, value in _documented(module_name):
                add(f"reference/python/{source}", inspect.getdoc(value))
    return [{**document, "metadata": dict(document["metadata"])} for document in documents]


def demo_documents() -> list[dict[str, Any]]:
    """The demo's knowledge base: the sample corpus, then Python's reference prose."""
    return load_corpus() + reference_documents()


def demo_corpus_lines() -> list[str]:
    """``demo_documents`` as JSON Lines, for ``store.knowledge.import_jsonl``."""
    return [json.dumps(document, ensure_ascii=False) for document in demo_documents()]
