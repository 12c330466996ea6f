"""``contextstore docs``: import, add, list, show, delete, search, reembed; one line per refusal.

Runs on SQLite and PostgreSQL through the SQL test fixtures, through the root command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from contextstore.interfaces.cli import app
from contextstore.sample_data import corpus_lines
from tests.backends.sql.conftest import database_url, empty_database_url

# fixtures, re-used from tests/backends/sql
__all__ = ["database_url", "empty_database_url"]

Invoke = Callable[..., Result]


@pytest.fixture
def cli(database_url: str) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        return runner.invoke(
            app, ["docs", *args, "--database-url", database_url, "--namespace", "kb"], input=input
        )

    return invoke


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result


def refused(result: Result, *words: str, code: int = 2) -> None:
    """Exit status ``code``, exactly one line on stderr mentioning ``words``, no traceback."""
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error:"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def write(tmp_path: Path, lines: list[bytes]) -> str:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


GOOD = [
    b'{"source": "ops/a.md", "text": "Failover the primary.", "metadata": {"team": "ops"}}',
    b'{"source": "ops/b.md", "text": "Failover drills monthly.", "metadata": {"team": "ops"}}',
    b'{"source": "support/c.md", "text": "Refunds in 30 days.", "metadata": {"team": "support"}}',
]


def test_import_prints_a_summary_and_is_idempotent(cli: Invoke, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    result = ok(cli("import", path))
    assert "added" in result.stdout and "3" in result.stdout
    assert as_json(cli("import", path, "--json")) == {"added": 0, "updated": 0, "unchanged": 3}
    listed = as_json(cli("list", "--json"))
    assert [d["source"] for d in listed] == ["ops/a.md", "ops/b.md", "support/c.md"]
    assert [d["chunks"] for d in listed] == [1, 1, 1]


def test_import_reads_stdin(cli: Invoke) -> None:
    assert as_json(cli("import", "-", "--json", input=b"\n".join(GOOD))) == {
        "added": 3,
        "updated": 0,
        "unchanged": 0,
    }


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (b'{"source": "x", "text": ""}', "line 2.text"),
        (b'{"source": "x", "text": "\xff oops"}', "line 2"),
        (b'{"source": "x", "text": "ok", "metadata": 5}', "line 2.metadata"),
        (b"not json", "line 2"),
    ],
)
def test_a_half_bad_file_is_refused_whole(
    cli: Invoke, tmp_path: Path, bad: bytes, where: str
) -> None:
    refused(cli("import", write(tmp_path, [GOOD[0], bad, GOOD[2]])), where)
    assert as_json(cli("list", "--json")) == []


def test_a_missing_file_is_one_error_line(cli: Invoke, tmp_path: Path) -> None:
    refused(cli("import", str(tmp_path / "nope.jsonl")), "nope.jsonl", code=1)


def test_add_show_delete(cli: Invoke) -> None:
    added = as_json(
        cli("add", "notes/x.md", "--text", "Zebra keys rotate.", "-m", '{"k": 1}', "--json")
    )
    assert added["source"] == "notes/x.md" and added["metadata"] == {"k": 1}
    assert added["passages"] == ["Zebra keys rotate."]
    from_stdin = as_json(cli("add", "notes/y.md", "--json", input="Read from stdin."))
    assert from_stdin["passages"] == ["Read from stdin."]
    shown = ok(cli("show", "notes/x.md"))
    assert "Zebra keys rotate." in shown.stdout and "passages" in shown.stdout
    ok(cli("delete", "notes/x.md"))
    refused(cli("show", "notes/x.md"), "notes/x.md", code=1)
    refused(cli("delete", "notes/x.md"), "notes/x.md", code=1)
    assert [d["source"] for d in as_json(cli("list", "--json"))] == ["notes/y.md"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--text", "", "s"], ["text"]),
        (["--text", "ok", ""], ["source"]),
        (["--text", "ok", "s", "-m", "{not json"], ["metadata"]),
        (["--text", "ok", "s", "-m", "[1, 2]"], ["metadata"]),
        (["--text", "nul \x00", "s"], ["text"]),
    ],
)
def test_bad_add_is_refused_naming_the_field(
    cli: Invoke, args: list[str], words: list[str]
) -> None:
    text_index = args.index("--text")
    source = args[text_index + 2]
    options = args[:text_index] + args[text_index : text_index + 2] + args[text_index + 3 :]
    refused(cli("add", source, *options), *words)
    assert as_json(cli("list", "--json")) == []


def test_list_filters_by_prefix_limit_and_offset(cli: Invoke, tmp_path: Path) -> None:
    ok(cli("import", write(tmp_path, GOOD)))
    assert [d["source"] for d in as_json(cli("list", "--prefix", "ops/", "--json"))] == [
        "ops/a.md",
        "ops/b.md",
    ]
    only = as_json(cli("list", "--limit", "1", "--offset", "1", "--json"))
    assert [d["source"] for d in only] == ["ops/b.md"]
    table = ok(cli("list")).stdout
    assert "3 documents" in table and "support/c.md" in table
    refused(cli("list", "--limit", "-1"), "limit")


def test_search_with_top_k_filters_and_json(cli: Invoke, tmp_path: Path) -> None:
    ok(cli("import", write(tmp_path, GOOD)))
    found = as_json(cli("search", "failover", "--json"))
    assert sorted(c["source"] for c in found) == ["ops/a.md", "ops/b.md"]
    assert all(c["score"] > 0 and c["passage"] == 0 for c in found)
    assert len(as_json(cli("search", "failover", "--top-k", "1", "--json"))) == 1
    assert as_json(cli("search", "failover", "--filter", "team=support", "--json")) == []
    either = cli("search", "failover refunds", "--filter", "team=support", "--filter", "team=ops")
    assert ok(either).stdout.count(".md") == 3
    assert "3 chunks" in either.stdout
    refused(cli("search", "failover", "--filter", "no-equals-sign"), "--filter", code=2)


def test_reembed_counts_the_chunks_it_embeds(cli: Invoke, tmp_path: Path) -> None:
    ok(cli("import", write(tmp_path, [line.encode() for line in corpus_lines()[:3]])))
    first = as_json(cli("reembed", "--json"))
    assert first["reembedded"] > 3 and first["embedder"] == "HashingEmbedder(dim=256)"
    assert as_json(cli("reembed", "--json"))["reembedded"] == 0
    fused = as_json(cli("search", "refund", "--embeddings", "--json"))
    assert fused and all(0.0 < c["score"] <= 1.0 for c in fused)


def test_search_takes_a_mode(cli: Invoke, tmp_path: Path) -> None:
    ok(cli("import", write(tmp_path, GOOD)))
    ok(cli("reembed"))
    # "refund" is not "Refunds": no lexical match, but the nearest passage by meaning.
    assert as_json(cli("search", "refund", "--mode", "lexical", "--embeddings", "--json")) == []
    hybrid = as_json(cli("search", "refund", "--embeddings", "--top-k", "1", "--json"))
    assert [c["source"] for c in hybrid] == ["support/c.md"]
    vector = as_json(cli("search", "refund", "--mode", "vector", "--embeddings", "--json"))
    # The drill note shares no 3-gram with "refund": cosine 0, so it is not returned.
    assert [c["source"] for c in vector] == ["support/c.md", "ops/a.md"]
    refused(cli("search", "refund", "--mode", "semantic"), "mode", "hybrid, lexical, vector")
    refused(cli("search", "refund", "--mode", "vector"), "mode", "embed")
