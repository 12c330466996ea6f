"""The README's Python snippet runs as printed, in an empty directory, and twice in a row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("```python", text.index("## Use it from Python")) + len("```python")
    return text[start : text.index("```", start)]


def test_the_python_snippet_works_in_an_empty_directory(tmp_path: Path) -> None:
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("CONTEXTSTORE_")
    }
    runs = [
        subprocess.run(
            [sys.executable, "-c", snippet()],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "[Lessons — durable guidance distilled from prior work; matched 1" in run.stdout
        assert "[Source: ops/postgres-failover.md]" in run.stdout
        assert run.stdout.rstrip().endswith("['ops/postgres-failover.md'] False")
    assert (tmp_path / "contextstore.db").is_file()
