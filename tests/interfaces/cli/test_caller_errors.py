"""The caller's mistakes on the command line: one ``error:`` line naming the field, exit 2.

Integers wider than a database column, too many filters or tags, a JSON Lines file of one
endless line, a request time limit of ``inf``: each is refused before anything is written,
never a traceback and never reported as the database being down. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from contextstore import connect
from contextstore.core.jsonl import MAX_LINE_BYTES
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.cli import app
from tests import REPO_ROOT
from tests.backends.sql.conftest import database_url, empty_database_url
from tests.interfaces.cli.test_bad_input import cli

__all__ = ["database_url", "empty_database_url"]  # fixtures, re-used from tests/backends/sql

HUGE = "99999999999999999999"
TAGS = [arg for i in range(65) for arg in ("--tag", f"t{i}")]


def usage_error(result: Result, *words: str) -> None:
    """Exit status 2, exactly one ``error:`` line on stderr holding ``words``, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    assert isinstance(result.exception, SystemExit), result.exception
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["lessons", "list", "--limit", HUGE], ["limit", "at most 9223372036854775807"]),
        (["lessons", "list", "--offset", HUGE], ["offset"]),
        (["docs", "list", "--limit", HUGE], ["limit"]),
        (["docs", "search", "failover", "--top-k", HUGE], ["top_k"]),
        (
            ["docs", "search", "failover", "--filter", f"n={10**30}"],
            ["filters", "wider than a 64-bit integer"],
        ),
        (
            ["docs", "search", "failover", *(f"--filter=k{i}=1" for i in range(1000))],
            ["filters", "1000 keys"],
        ),
        (["match", *TAGS], ["scope.tags", "65 values"]),
        (["run", "how do I fail over?", *TAGS], ["scope.tags"]),
    ],
)
def test_a_value_no_database_takes_is_one_usage_line(
    database_url: str, args: list[str], words: list[str]
) -> None:
    result = CliRunner().invoke(app, [*args, "--database-url", database_url])
    usage_error(result, *words)
    with connect(database_url=database_url, redis_url="") as store:
        assert store.metrics.count() == 0  # not even a run was recorded


def one_line(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


PEAK = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def cli_with_peak(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``python -m contextstore *args`` and that process's peak resident size (KiB).

    The command is started by a small Python process that reports its only child's peak:
    a child forked straight from this (large, long-running) test process would count this
    process's pages in its own peak until it execs."""
    with tempfile.NamedTemporaryFile("r") as peak:
        result = subprocess.run(
            [sys.executable, "-c", PEAK, peak.name, sys.executable, "-m", "contextstore", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return result, int(Path(peak.name).read_text())


@pytest.mark.slow
@pytest.mark.parametrize("command", ["lessons", "docs"])
def test_a_one_gibibyte_line_is_refused_without_reading_it(
    database_url: str, tmp_path: Path, command: str
) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as handle:
        handle.truncate(2**30)  # sparse: one line, a gibibyte long
    result, peak_kib = cli_with_peak(command, "import", str(path), "--database-url", database_url)
    one_line(result, 2, "line 1", f"longer than {MAX_LINE_BYTES:,} bytes")
    # That process's own peak, in KiB: far below the line's size.
    assert peak_kib < 400 * 1024
    with connect(database_url=database_url, redis_url="") as store:
        assert store.lessons.list() == [] and store.knowledge.list() == []


def serve_environment(tmp_path: Path, **variables: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("CONTEXTSTORE")}
    env["CONTEXTSTORE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'serve.db'}"
    env.update(variables)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e300", "soon"])
def test_serve_refuses_a_request_time_limit_it_cannot_keep(tmp_path: Path, value: str) -> None:
    keys = tmp_path / "keys.json"
    add_key(keys, "ops", "admin")
    env = serve_environment(
        tmp_path, CONTEXTSTORE_API_KEYS=str(keys), CONTEXTSTORE_REQUEST_TIMEOUT=value
    )
    one_line(cli("serve", "--port", "0", env=env), 2, "CONTEXTSTORE_REQUEST_TIMEOUT")


@pytest.mark.slow
def test_serve_refuses_a_missing_or_unreadable_key_file_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "keys.json"
    env = serve_environment(tmp_path, CONTEXTSTORE_API_KEYS=str(missing))
    one_line(cli("serve", "--port", "0", env=env), 1, str(missing), "does not exist")
    directory = tmp_path / "a-directory"
    directory.mkdir()
    env = serve_environment(tmp_path, CONTEXTSTORE_API_KEYS=str(directory))
    one_line(cli("serve", "--port", "0", env=env), 1, str(directory))
    malformed = tmp_path / "keys.json"
    malformed.write_text("{not json", encoding="utf-8")
    env = serve_environment(tmp_path, CONTEXTSTORE_API_KEYS=str(malformed))
    one_line(cli("serve", "--port", "0", env=env), 1, str(malformed), "malformed")
