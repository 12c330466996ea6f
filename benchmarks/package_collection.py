"""A second known-answer collection from real prose: the descriptions of installed packages.

Every package the system's package manager lists as installed (Debian's
``/var/lib/dpkg/status``) has a one-line synopsis ("classic UNIX line editor") and a long
description written for people choosing software. The synopsis is the query, the long
description its one relevant document; the synopsis is not part of the document. Its prose is
unlike the docstring collection's: product descriptions rather than API reference, short noun
phrases rather than sentences as queries, and many near-identical descriptions (library
packages split by version or architecture), so ties are common and counted as ties.

The collection is rebuilt from the machine's own package list; the benchmark prints its size.
On a system without that file it is empty and the benchmark says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.docstring_collection import Entry

__all__ = ["STATUS_FILE", "package_collection"]

STATUS_FILE = Path("/var/lib/dpkg/status")
_FIELD = re.compile(r"^(?P<name>[A-Za-z-]+):[ \t]?(?P<value>.*)$")


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, ""
        elif line[0] in " \t" and last:
            current[last] += "\n" + line
        elif (match := _FIELD.match(line)) is not None:
            last = match["name"]
            current[last] = match["value"]
    if current:
        stanzas.append(current)
    return stanzas


def _description(field: str) -> tuple[str, str]:
    """Synopsis and long description; a line of " ." separates paragraphs."""
    synopsis, _, rest = field.partition("\n")
    paragraphs: list[list[str]] = [[]]
    for line in rest.splitlines():
        if line.strip() == ".":
            paragraphs.append([])
        else:
            paragraphs[-1].append(line.strip())
    body = "\n\n".join(" ".join(lines) for lines in paragraphs if lines)
    return " ".join(synopsis.split()), body


def package_collection(path: Path = STATUS_FILE) -> list[Entry]:
    """Installed packages with a synopsis of 4+ words and a description of 200+ characters.

    A synopsis seen twice (packages of one source) is kept once, for its first package.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    entries, seen = [], set()
    for stanza in _stanzas(text):
        if "installed" not in stanza.get("Status", "") or "Description" not in stanza:
            continue
        summary, body = _description(stanza["Description"])
        if len(summary.split()) < 4 or len(body) < 200 or summary.lower() in seen:
            continue
        seen.add(summary.lower())
        entries.append(Entry(stanza["Package"], summary, body))
    return sorted(entries, key=lambda entry: entry.source)
