"""A labelled retrieval collection built offline from real prose: API reference docstrings.

Every public function or class of the listed modules (Python's standard library and numpy)
whose docstring has a one-sentence summary and a body of at least 300 characters gives one
document and one query: the query is the summary ("Return evenly spaced values within a given
interval."), the document the body that follows it (parameters, notes, examples), and the
document is the one relevant answer to its query. The summary is left out of the document, so
a query must be matched through what the body says, as an agent's question is matched
through a runbook's text. Summaries that appear twice (aliases) are kept once.

The collection is rebuilt from the installed Python and numpy, so its size depends on their
versions; the benchmark prints the counts it used.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

__all__ = ["QUALITY_MODULES", "Entry", "collection", "prose_passages"]

QUALITY_MODULES = (
    "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma",
    "numpy.polynomial.polynomial", "numpy.char", "os", "os.path", "shutil", "json", "re",
    "string", "textwrap", "difflib", "datetime", "calendar", "collections", "heapq", "bisect",
    "itertools", "functools", "operator", "pathlib", "tempfile", "glob", "fnmatch", "csv",
    "configparser", "hashlib", "hmac", "secrets", "logging", "argparse", "subprocess",
    "threading", "multiprocessing", "asyncio", "socket", "ssl", "select", "signal", "email",
    "smtplib", "urllib.parse", "urllib.request", "http.client", "http.server",
    "xml.etree.ElementTree", "html", "base64", "binascii", "struct", "codecs", "zipfile",
    "tarfile", "gzip", "bz2", "lzma", "zlib", "sqlite3", "pickle", "copy", "pprint", "enum",
    "math", "cmath", "decimal", "fractions", "random", "statistics", "time", "uuid", "inspect",
    "typing", "dataclasses", "contextlib", "abc", "io", "sys", "traceback", "warnings",
    "weakref", "gc", "platform", "locale", "gettext", "unicodedata", "ipaddress", "mimetypes",
    "queue", "sched", "selectors", "shlex", "stat", "filecmp", "getpass", "doctest",
    "unittest", "timeit", "trace", "tokenize", "ast", "dis", "importlib", "pkgutil",
    "zipimport", "concurrent.futures", "numbers", "array", "graphlib", "reprlib", "types",
)  # fmt: skip

_SIGNATURE = re.compile(r"^[\w.]+\(")


@dataclass(frozen=True, slots=True)
class Entry:
    """One document (``body``) and its query (``summary``); ``source`` names the API."""

    source: str
    summary: str
    body: str


def _split(doc: str) -> tuple[str, str] | None:
    parts = doc.strip().split("\n\n", 1)
    # C functions open with their signature; the summary is the paragraph after it.
    while len(parts) == 2 and _SIGNATURE.match(parts[0]):
        parts = parts[1].strip().split("\n\n", 1)
    if len(parts) < 2:
        return None
    return " ".join(parts[0].split()), parts[1].strip()


def _documented(module_name: str) -> list[tuple[str, str]]:
    try:
        module = importlib.import_module(module_name)
    except Exception:  # a module missing on this platform is simply left out
        return []
    found = []
    for name in sorted(dir(module)):
        if name.startswith("_"):
            continue
        value = getattr(module, name, None)
        if not (
            inspect.isfunction(value)
            or inspect.isclass(value)
            or inspect.isbuiltin(value)
            or type(value).__name__ == "ufunc"
        ):
            continue
        doc = inspect.getdoc(value)
        if doc:
            found.append((f"{module_name}.{name}", doc))
    return found


def collection(modules: tuple[str, ...] = QUALITY_MODULES) -> list[Entry]:
    """The known-answer entries of ``modules``, in a stable order."""
    entries = []
    seen: set[str] = set()
    for module_name in modules:
        for source, doc in _documented(module_name):
            split = _split(doc)
            if split is None:
                continue
            summary, body = split
            if len(summary.split()) < 5 or len(body) < 300 or summary.lower() in seen:
                continue
            seen.add(summary.lower())
            entries.append(Entry(source, summary, body))
    return entries


def prose_passages(packages: tuple[str, ...], limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` (docstring, source) pairs from every module of ``packages``.

    A larger corpus of real prose for timing: every documented public name of every
    importable submodule, in a stable order. Modules that fail to import are skipped.
    """
    found: list[tuple[str, str]] = []
    for package in packages:
        try:
            root = importlib.import_module(package)
        except Exception:
            continue
        names = [package]
        path = getattr(root, "__path__", None)
        if path is not None:
            names += sorted(
                info.name
                for info in pkgutil.walk_packages(path, f"{package}.", onerror=lambda _: None)
                if ".tests" not in info.name and "._" not in info.name
            )
        for module_name in names:
            for source, doc in _documented(module_name):
                if len(doc) >= 200:
                    found.append((doc, source))
                    if len(found) >= limit:
                        return found
    return found
