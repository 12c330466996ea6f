"""The README says what the package does, to the letter: each claim checked against the code."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks import runner as bench_runner
from benchmarks import services as bench_services
from contextstore.cli import app
from contextstore.sample_data import load_corpus, load_demo_queries, load_lessons, sample_retriever

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def flat(text: str) -> str:
    """The README with line breaks folded, so a claim can be found across its wrapping."""
    return " ".join(text.split())


def test_the_sample_counts_are_the_shipped_data() -> None:
    corpus, lessons, queries = load_corpus(), load_lessons(), load_demo_queries()
    languages = Counter(document["metadata"]["lang"] for document in corpus)
    roles = Counter(query.tags[0] for query in queries)
    active = sum(1 for lesson in lessons if lesson.status == "active")
    repeats = len(queries) - len({query.query for query in queries})
    claim = (
        f"{len(corpus)} internal documents ({languages['en']} in English, {languages['ar']} in "
        f"Arabic) indexed as {len(sample_retriever())} passages, {len(lessons)} lessons "
        f"({active} active; the others proposed, retired or superseded, to show the "
        f"lifecycle), and {len(queries)} queries from the three roles ({roles['support']} "
        f"support, {roles['ops']} ops, {roles['coding']} coding; {repeats} of them repeat an "
        "earlier query, to show cache hits)"
    )
    assert claim in flat(README)
    assert set(roles) == {"support", "ops", "coding"}
    assert set(languages) == {"en", "ar"}


EXAMPLES = [
    ("2026-05-01T12:00:00Z", "2026-05-01T12:00:00.000000+00:00"),
    ("2026-05-01T14:00:00.250+02:00", "2026-05-01T12:00:00.250000+00:00"),
]


def test_the_created_at_formats_are_the_ones_the_cli_accepts_and_export_writes(
    tmp_path: Path,
) -> None:
    text = flat(README)
    for given, written in EXAMPLES:
        assert f"`{given}`" in text and f"`{written}`" in text
    assert "one without an offset is refused" in text

    runner = CliRunner()
    url = ["--database-url", f"sqlite:///{tmp_path / 'lessons.db'}"]
    for number, (given, _) in enumerate(EXAMPLES):
        added = runner.invoke(
            app, ["lessons", "add", f"a.b.{number}", "--form", "x", "--created-at", given, *url]
        )
        assert added.exit_code == 0, added.output
    refused = runner.invoke(
        app, ["lessons", "add", "a.b.9", "--form", "x", "--created-at", "2026-05-01T12:00:00", *url]
    )
    assert refused.exit_code == 1
    assert refused.stderr == "error: created_at: '2026-05-01T12:00:00' has no UTC offset\n"

    exported = runner.invoke(app, ["lessons", "export", *url])
    assert exported.exit_code == 0, exported.output
    written = [json.loads(line)["created_at"] for line in exported.stdout.splitlines()]
    assert written == [expected for _, expected in EXAMPLES]

    again = tmp_path / "again.jsonl"
    again.write_text(exported.stdout, encoding="utf-8")
    reimported = runner.invoke(app, ["lessons", "import", str(again), "--json", *url])
    assert json.loads(reimported.stdout) == {"added": 0, "updated": 0, "unchanged": 2}


def test_the_benchmarks_keep_to_their_own_redis_database_and_scratch_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (bench_services.ENV_REDIS_URL, bench_services.ENV_POSTGRES_URL):
        monkeypatch.delenv(name, raising=False)
    args = bench_runner.parse_args([])
    assert args.redis_url == "redis://127.0.0.1:6379/15"
    assert args.postgres_url == "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    text = flat(README)
    assert f"`{args.redis_url}` by default" in text
    assert f"through the admin URL `{args.postgres_url}`" in text
    for variable in (bench_services.ENV_REDIS_URL, bench_services.ENV_POSTGRES_URL):
        assert f"`{variable}`" in text

    monkeypatch.setenv(bench_services.ENV_REDIS_URL, "redis://127.0.0.1:6379/14")
    monkeypatch.setenv(bench_services.ENV_POSTGRES_URL, "postgresql://me@db.example/admin")
    args = bench_runner.parse_args([])
    assert (args.redis_url, args.postgres_url) == (
        "redis://127.0.0.1:6379/14",
        "postgresql://me@db.example/admin",
    )
    args = bench_runner.parse_args(["--redis-url", "redis://h:1/3"])
    assert args.redis_url == "redis://h:1/3"
