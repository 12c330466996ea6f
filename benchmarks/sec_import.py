"""A large lesson import into SQLite next to a running agent.

An agent process calls ``run()`` every 20 ms on the same SQLite file: first alone (the
baseline for its runs), then while another process imports 100,000 lessons through the
public ``contextstore lessons import``. SQLite has one write lock, and the import must never
hold the agent up for long: the figure is the agent's slowest run during the import (target
≤ 1 s), with its p50, p95 and the number of runs that raised. The import's own duration is
compared with the same import into a fresh file with no agent beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.timing import percentile
from contextstore.core.lessons import LessonRecord, write_jsonl

SECTION = "Lesson import, SQLite"
ROOT = Path(__file__).resolve().parents[1]
IMPORT = [sys.executable, "-m", "contextstore", "lessons", "import"]

# The agent keeps running when a run raises: the errors are counted and the first is kept.
# It runs alone for IDLE_S, then until STOP exists (the import), then alone for AFTER_S more.
AGENT = """
import json, os, time
from contextstore import Scope, connect
engine = connect(database_url=os.environ["URL"]).engine()
scope = Scope(entity_ids=tuple(json.loads(os.environ["SCOPE_IDS"])))
engine.run("warm up", scope=scope)
errors = []
matched = [0]
def phase(stop):
    times = []
    due = time.monotonic()
    while not stop():
        started = time.perf_counter()
        try:
            matched[0] = engine.run("how do I import lessons?", scope=scope).lessons.matched_count
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        times.append(time.perf_counter() - started)
        due += 0.02  # every 20 ms, on a schedule; a late run is followed at once
        time.sleep(max(0.0, due - time.monotonic()))
    return times
deadline = time.monotonic() + float(os.environ["IDLE_S"])
alone = phase(lambda: time.monotonic() > deadline)
alone_errors = len(errors)
open(os.environ["READY"], "w").close()
busy = phase(lambda: os.path.exists(os.environ["STOP"]))
busy_errors = len(errors) - alone_errors
deadline = time.monotonic() + float(os.environ.get("AFTER_S", "0"))
after = phase(lambda: time.monotonic() > deadline)
print(json.dumps({"alone": alone, "busy": busy, "after": after, "alone_errors": alone_errors,
                  "errors": busy_errors, "after_errors": len(errors) - alone_errors - busy_errors,
                  "first_error": errors[:1], "matched": matched[0]}))
"""


@dataclass(frozen=True)
class AgentBesideImport:
    """An agent's run times (seconds) alone before the import, during it and after it (the
    same file, no import), the errors of each phase, what its last run matched, and how
    long the import took."""

    alone: list[float]
    busy: list[float]
    after: list[float]
    errors: int
    alone_errors: int
    after_errors: int
    first_error: list[str]
    matched: int
    import_s: float


def agent_beside_import(
    path: Path, url: str, scope_ids: tuple[str, ...], *, idle_s: float, after_s: float
) -> AgentBesideImport:
    """Run the agent on ``url`` (a migrated SQLite file) with a scope of ``scope_ids``, and
    ``contextstore lessons import`` of ``path`` beside it once it has run alone ``idle_s``."""
    ready, stop = path.with_suffix(".ready"), path.with_suffix(".stop")
    env = {
        "URL": url,
        "READY": str(ready),
        "STOP": str(stop),
        "IDLE_S": str(idle_s),
        "AFTER_S": str(after_s),
        "SCOPE_IDS": json.dumps(list(scope_ids)),
    }
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(AGENT)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists():
            if agent.poll() is not None:
                raise RuntimeError(f"the agent failed: {agent.communicate()[1][-500:]}")
            time.sleep(0.05)
        seconds = _import(path, url)
    except BaseException:
        agent.kill()
        agent.communicate()
        raise
    finally:
        stop.touch()
    out, err = agent.communicate(timeout=120 + after_s)
    if agent.returncode != 0:
        raise RuntimeError(f"the agent failed: {err[-500:]}")
    return AgentBesideImport(**json.loads(out), import_s=seconds)


def _lessons(path: Path, count: int) -> None:
    records = (
        LessonRecord(
            f"bench.import.l{n:06d}",
            f"Guidance number {n} for importing lessons.",
            status="active",
            severity=("critical", "warning", "info")[n % 3],
            applies_to=("tag:import", f"id:bench.import.l{n:06d}"),
            evidence={"n": n},
        )
        for n in range(count)
    )
    with path.open("w", encoding="utf-8") as out:
        out.writelines(write_jsonl(records))


def _import(path: Path, url: str) -> float:
    """Seconds ``contextstore lessons import`` takes, as a process of its own."""
    started = time.perf_counter()
    importer = subprocess.run(
        [*IMPORT, str(path), "--json", "--database-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if importer.returncode != 0:
        raise RuntimeError(f"the import failed: {importer.stderr[-500:]}")
    return seconds


def run(bench: Bench) -> list[Row]:
    count = bench.pick(10_000, 100_000)
    path = bench.services.scratch_file("import.jsonl")
    bench.say(f"import: writing {count:,} lessons to a file")
    _lessons(path, count)
    bench.say(f"import: importing {count:,} lessons alone (baseline)")
    seconds_alone = _import(path, bench.services.database_url("sqlite", "import_alone"))

    url = bench.services.database_url("sqlite", "import")
    bench.say(f"import: the agent alone, then importing {count:,} lessons beside it")
    measured = agent_beside_import(path, url, ("bench.import.l000001",), idle_s=5, after_s=0)
    seconds = measured.import_s
    alone, busy, errors = measured.alone, measured.busy, measured.errors
    slowest, slowest_alone = max(busy) * 1000, max(alone) * 1000
    p50, p50_alone = percentile(busy, 0.5) * 1000, percentile(alone, 0.5) * 1000
    p95, p95_alone = percentile(busy, 0.95) * 1000, percentile(alone, 0.95) * 1000
    first = f"; first: {measured.first_error[0][:200]}" if errors else ""
    note = (
        f"{count:,} lessons imported in {seconds:.1f} s; {len(busy):,} agent runs meanwhile, "
        f"{errors} raised{first}"
    )
    values = {"slowest_ms": slowest, "alone_ms": slowest_alone, "runs": len(busy)}
    return [
        Row(
            SECTION,
            f"agent's slowest run() during a {count:,}-lesson import",
            ms(slowest),
            "slowest run() alone",
            ms(slowest_alone),
            slowest / slowest_alone,
            target="≤ 1 s, no error",
            met=slowest <= 1000 and errors == 0,
            note=note,
            values={**values, "errors": errors, "alone_errors": measured.alone_errors},
        ),
        Row(
            SECTION,
            f"agent's p50 run() during a {count:,}-lesson import",
            ms(p50),
            "p50 run() alone",
            ms(p50_alone),
            p50 / p50_alone,
            values={"p50_ms": p50, "alone_ms": p50_alone},
        ),
        Row(
            SECTION,
            f"agent's p95 run() during a {count:,}-lesson import",
            ms(p95),
            "p95 run() alone",
            ms(p95_alone),
            p95 / p95_alone,
            values={"p95_ms": p95, "alone_ms": p95_alone},
        ),
        Row(
            SECTION,
            f"{count:,}-lesson import beside the agent (duration)",
            f"{seconds:.1f} s",
            "the same import, no agent",
            f"{seconds_alone:.1f} s",
            seconds / seconds_alone,
            values={"import_s": seconds, "alone_s": seconds_alone},
        ),
    ]


SHARED_SECTION = "Lesson import, SQLite, shared scope keys"
SHARED_TAGS = 50
SHARED_IDS = 97
# The agent's scope: one of the 97 entity ids, which about one lesson in 97 names.
SHARED_SCOPE = ("bench.shared.e01",)


def shared_key_lessons(count: int) -> Iterator[LessonRecord]:
    """``count`` lessons of two scope keys each, drawn from 50 tags and 97 entity ids: every
    key is shared by thousands of lessons at 100,000 (the agent's scope names one of them)."""
    for n in range(count):
        yield LessonRecord(
            f"bench.shared.l{n:06d}",
            f"Guidance number {n} for importing lessons.",
            status="active",
            severity=("critical", "warning", "info")[n % 3],
            applies_to=(f"tag:t{n % SHARED_TAGS:02d}", f"id:bench.shared.e{n % SHARED_IDS:02d}"),
            evidence={"n": n},
        )


def write_shared_key_lessons(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.writelines(write_jsonl(shared_key_lessons(count)))


def run_shared_keys(bench: Bench) -> list[Row]:
    """The agent's runs during the import beside its runs just after it, on the same file
    holding the same lessons: the import's own cost, apart from what the lessons cost."""
    count = bench.pick(10_000, 100_000)
    path = bench.services.scratch_file("import-shared.jsonl")
    bench.say(f"import: writing {count:,} lessons of shared scope keys")
    write_shared_key_lessons(path, count)
    url = bench.services.database_url("sqlite", "import_shared")
    bench.say(f"import: {count:,} lessons of shared keys beside the agent")
    measured = agent_beside_import(path, url, SHARED_SCOPE, idle_s=2, after_s=10)
    busy, after, errors = measured.busy, measured.after, measured.errors
    slowest, slowest_after = max(busy) * 1000, max(after) * 1000
    p50, p50_after = percentile(busy, 0.5) * 1000, percentile(after, 0.5) * 1000
    first = f"; first: {measured.first_error[0][:200]}" if errors else ""
    note = (
        f"{count:,} lessons imported in {measured.import_s:.1f} s; {len(busy):,} agent runs "
        f"meanwhile, {errors} raised{first}; the agent's last run matched "
        f"{measured.matched:,} lessons"
    )
    return [
        Row(
            SHARED_SECTION,
            f"agent's slowest run() during a {count:,}-lesson import (2 keys each of 147)",
            ms(slowest),
            "slowest run() after it, same lessons",
            ms(slowest_after),
            slowest / slowest_after,
            target="≤ 1 s, no error",
            met=slowest <= 1000 and errors == 0,
            note=note,
            values={
                "slowest_ms": slowest,
                "after_ms": slowest_after,
                "runs": len(busy),
                "errors": errors,
                "matched": measured.matched,
                "import_s": measured.import_s,
            },
        ),
        Row(
            SHARED_SECTION,
            f"agent's p50 run() during a {count:,}-lesson import (2 keys each of 147)",
            ms(p50),
            "p50 run() after it, same lessons",
            ms(p50_after),
            p50 / p50_after,
            values={"p50_ms": p50, "after_ms": p50_after},
        ),
    ]
