"""The repository stands on its own: no file cites a document that lives outside it.

The design the code relies on is in docs/ (design contracts and decision records); a comment
that pointed at an outside contract or at another project's code would leave a reader with
nothing to open.
"""

from __future__ import annotations

import re
import subprocess

from tests import REPO_ROOT

OUTSIDE = re.compile(
    r"SPEC\.md|\bSPEC\b|/work/shared|\bseeds/"
    r"|(?i:\bthe seed's\b|\bthe original\b|\boriginal's\b)"
)
# Plain English uses of "the original" about the project's own data, not a reference.
ALLOWED = {
    ("contextstore/core/compose.py", "the original chunk"),
    ("migrations/versions/0006_report_indexes.py", "the original index"),
    ("contextstore/data/corpus.jsonl", "the original payment method"),
}

THIS_FILE = "tests/docs/test_no_outside_references.py"  # it spells the pattern out


def tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in listed.decode().split("\0") if name]


def test_no_file_refers_to_a_document_outside_the_repository() -> None:
    found = []
    for name in tracked_text_files():
        path = REPO_ROOT / name
        if name == THIS_FILE or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in OUTSIDE.finditer(text):
            line = text[text.rfind("\n", 0, match.start()) + 1 : text.find("\n", match.end())]
            if any(name == file and phrase in line for file, phrase in ALLOWED):
                continue
            found.append(f"{name}: {line.strip()[:120]}")
    assert found == []


def test_the_pattern_catches_each_kind_of_outside_reference() -> None:
    for text in ("see SPEC §1.2", "as the original's cast", "/work/shared/x", "the seed's order"):
        assert OUTSIDE.search(text), text
