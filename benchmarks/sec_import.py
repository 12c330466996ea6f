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
from pathlib import Path

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.timing import percentile
from contextstore.lessons import LessonRecord, write_jsonl

SECTION = "Lesson import, SQLite"
ROOT = Path(__file__).resolve().parents[1]
IMPORT = [sys.executable, "-m", "contextstore", "lessons", "import"]

# The agent keeps running when a run raises: the errors are counted and the first is kept.
AGENT = """
import json, os, time
from contextstore import Scope, connect
engine = connect(database_url=os.environ["URL"]).engine()
scope = Scope(entity_ids=("bench.import.l000001",))  # one imported lesson matches
engine.run("warm up", scope=scope)
errors = []
def phase(stop):
    times = []
    due = time.monotonic()
    while not stop():
        started = time.perf_counter()
        try:
            engine.run("how do I import lessons?", scope=scope)
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
print(json.dumps({"alone": alone, "busy": busy, "alone_errors": alone_errors,
                  "errors": len(errors) - alone_errors, "first_error": errors[:1]}))
"""


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
    ready, stop = path.with_suffix(".ready"), path.with_suffix(".stop")
    env = {"URL": url, "READY": str(ready), "STOP": str(stop), "IDLE_S": "5"}
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(AGENT)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        bench.say("import: the agent runs alone (baseline)")
        while not ready.exists():
            if agent.poll() is not None:
                raise RuntimeError(f"the agent failed: {agent.communicate()[1][-500:]}")
            time.sleep(0.05)
        bench.say(f"import: importing {count:,} lessons while the agent runs")
        seconds = _import(path, url)
    finally:
        stop.touch()
    out, err = agent.communicate(timeout=120)
    if agent.returncode != 0:
        raise RuntimeError(f"the agent failed: {err[-500:]}")
    measured = json.loads(out)
    alone, busy, errors = measured["alone"], measured["busy"], measured["errors"]
    slowest, slowest_alone = max(busy) * 1000, max(alone) * 1000
    p50, p50_alone = percentile(busy, 0.5) * 1000, percentile(alone, 0.5) * 1000
    p95, p95_alone = percentile(busy, 0.95) * 1000, percentile(alone, 0.95) * 1000
    first = f"; first: {measured['first_error'][0][:200]}" if errors else ""
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
            values={**values, "errors": errors, "alone_errors": measured["alone_errors"]},
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
