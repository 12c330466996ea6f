"""Imports next to other writers: real processes, exact counts.

- PostgreSQL: four processes import the same file at once; every one succeeds and the
  database ends as after one import.
- SQLite: a large import writes in short transactions, so an agent's run keeps its turn at
  the single write lock; a refused import writes nothing, an interrupted one is finished by
  running it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.lessons import imports as imports_module
from contextstore.backends.sql.repository import ImportSummary, LessonRepository
from contextstore.core.lessons import LessonRecord, write_jsonl
from contextstore.errors import ValidationError
from tests import REPO_ROOT
from tests.backends.sql.conftest import POSTGRES_ONLY, SQLITE_ONLY, counts

ROOT = REPO_ROOT
IMPORT = [sys.executable, "-m", "contextstore", "lessons", "import"]


def lesson_file(path: Path, count: int, prefix: str = "fleet.import") -> Path:
    records = [
        LessonRecord(
            f"{prefix}.l{n:06d}",
            f"Guidance {n}.",
            status="active",
            severity=("critical", "warning", "info")[n % 3],
            applies_to=("tag:import", f"id:{prefix}.l{n:06d}"),
            evidence={"n": n},
        )
        for n in range(count)
    ]
    path.write_text("".join(write_jsonl(records)), encoding="utf-8")
    return path


def python(code: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@POSTGRES_ONLY
def test_four_processes_importing_one_file_all_succeed(database_url: str, tmp_path: Path) -> None:
    path = lesson_file(tmp_path / "lessons.jsonl", 300)
    command = [sys.executable, "-m", "contextstore", "lessons", "import", str(path)]
    processes = [
        subprocess.Popen(
            [*command, "--json", "--database-url", database_url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    summaries = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        summaries.append(json.loads(out))
    assert sum(s["added"] for s in summaries) == 300
    assert all(s["added"] + s["unchanged"] == 300 and s["updated"] == 0 for s in summaries)
    engine = create_database_engine(database_url)
    repo = LessonRepository(engine)
    assert counts(engine)[:2] == (300, 600)
    assert repo.events_count("insert") == 300
    assert repo.events_count() == 300 + 600  # each insert and its two keys, nothing else
    engine.dispose()


@pytest.mark.slow
@SQLITE_ONLY
def test_a_large_sqlite_import_never_holds_up_an_agent_for_a_second(
    database_url: str, tmp_path: Path
) -> None:
    """An agent runs every 20 ms while 6,000 lessons are imported; its slowest run ≤ 1 s."""
    path = lesson_file(tmp_path / "lessons.jsonl", 6000)
    agent = python(
        """
        import json, os, time
        from contextstore import Scope, connect
        store = connect(database_url=os.environ["URL"])
        engine = store.engine()
        # One imported lesson matches this scope: the run's own work stays the same size, so
        # any slowdown is waiting for the importer.
        scope = Scope(entity_ids=("fleet.import.l000001",))
        engine.run("warm up", scope=scope)
        open(os.environ["READY"], "w").close()
        slowest, runs = 0.0, 0
        while not os.path.exists(os.environ["STOP"]):
            started = time.perf_counter()
            engine.run("how do I import lessons?", scope=scope)
            slowest = max(slowest, time.perf_counter() - started)
            runs += 1
            time.sleep(0.02)
        print(json.dumps({"slowest": slowest, "runs": runs}))
        """,
        URL=database_url,
        READY=str(tmp_path / "ready"),
        STOP=str(tmp_path / "stop"),
    )
    try:
        while not (tmp_path / "ready").exists():
            assert agent.poll() is None, agent.communicate()[1]
        importer = subprocess.run(
            [*IMPORT, str(path), "--json", "--database-url", database_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert importer.returncode == 0, importer.stderr
        assert json.loads(importer.stdout) == {"added": 6000, "updated": 0, "unchanged": 0}
    finally:
        (tmp_path / "stop").touch()
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    measured = json.loads(out)
    assert measured["runs"] >= 20
    assert measured["slowest"] <= 1.0, measured
    engine = create_database_engine(database_url)
    assert counts(engine)[:2] == (6000, 12000)
    engine.dispose()


def test_a_refused_large_import_writes_nothing(engine: sa.Engine, tmp_path: Path) -> None:
    """The refusal is found before the first chunk is written (the last record is bad)."""
    repo = LessonRepository(engine)
    path = lesson_file(tmp_path / "lessons.jsonl", 1200)
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[-1])
    bad["superseded_by"], bad["status"] = "no.such.lesson", "superseded"
    lines[-1] = json.dumps(bad)
    with pytest.raises(ValidationError) as raised:
        repo.import_jsonl(lines)
    assert raised.value.field == "superseded_by"
    assert counts(engine) == (0, 0, 0)


@SQLITE_ONLY
def test_an_interrupted_sqlite_import_is_finished_by_running_it_again(
    engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second chunk's transaction fails (as a full disk would): the first stays."""
    repo = LessonRepository(engine)
    lines = lesson_file(tmp_path / "lessons.jsonl", 1200).read_text(encoding="utf-8")
    monkeypatch.setattr(imports_module, "IMPORT_PAUSE_S", 0.0)
    real_chunk = LessonRepository._import_chunk
    calls = []

    def failing_second_chunk(
        self: LessonRepository, chunk: list[LessonRecord], now: datetime
    ) -> ImportSummary:
        calls.append(len(chunk))
        if len(calls) == 2:
            raise ValidationError("record", "the disk is full")
        return real_chunk(self, chunk, now)

    monkeypatch.setattr(LessonRepository, "_import_chunk", failing_second_chunk)
    with pytest.raises(ValidationError):
        repo.import_jsonl(lines.splitlines())
    first = calls[0]
    assert counts(engine)[0] == first  # the first chunk stayed, nothing after it
    monkeypatch.setattr(LessonRepository, "_import_chunk", real_chunk)
    summary = repo.import_jsonl(lines.splitlines())
    assert (summary.added, summary.updated, summary.unchanged) == (1200 - first, 0, first)
    assert counts(engine)[:2] == (1200, 2400)
