"""A large lesson import into SQLite next to a running agent.

An agent process runs ``run()`` every 20 ms on the same SQLite file; first alone (the
baseline), then while another process imports 100,000 lessons (``contextstore lessons
import``). The figure is the agent's slowest run during the import, against its slowest run
alone: SQLite has one write lock, and the import must never hold the agent up for long.
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
from contextstore.lessons import LessonRecord, write_jsonl

SECTION = "Lesson import, SQLite"
ROOT = Path(__file__).resolve().parents[1]
IMPORT = [sys.executable, "-m", "contextstore", "lessons", "import"]

AGENT = """
import json, os, time
from contextstore import Scope, connect
engine = connect(database_url=os.environ["URL"]).engine()
scope = Scope(entity_ids=("bench.import.l000001",))  # one imported lesson matches
engine.run("warm up", scope=scope)
def phase(stop):
    times = []
    while not stop():
        started = time.perf_counter()
        engine.run("how do I import lessons?", scope=scope)
        times.append(time.perf_counter() - started)
        time.sleep(0.02)
    return times
deadline = time.monotonic() + float(os.environ["IDLE_S"])
alone = phase(lambda: time.monotonic() > deadline)
open(os.environ["READY"], "w").close()
busy = phase(lambda: os.path.exists(os.environ["STOP"]))
print(json.dumps({"alone": alone, "busy": busy}))
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


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(bench: Bench) -> list[Row]:
    count = bench.pick(10_000, 100_000)
    url = bench.services.database_url("sqlite", "import")
    path = bench.services.scratch_file("import.jsonl")
    bench.say(f"import: writing {count:,} lessons to a file")
    _lessons(path, count)
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
    finally:
        stop.touch()
    out, err = agent.communicate(timeout=120)
    if agent.returncode != 0:
        raise RuntimeError(f"the agent failed: {err[-500:]}")
    measured = json.loads(out)
    alone, busy = measured["alone"], measured["busy"]
    slowest, slowest_alone = max(busy) * 1000, max(alone) * 1000
    p99, p99_alone = _p99(busy) * 1000, _p99(alone) * 1000
    note = f"{count:,} lessons imported in {seconds:.1f} s; {len(busy):,} agent runs meanwhile"
    return [
        Row(
            SECTION,
            f"agent's slowest run() during a {count:,}-lesson import",
            ms(slowest),
            "slowest run() alone",
            ms(slowest_alone),
            slowest / slowest_alone,
            target="≤ 1 s",
            met=slowest <= 1000,
            note=note,
            values={"slowest_ms": slowest, "alone_ms": slowest_alone, "import_s": seconds},
        ),
        Row(
            SECTION,
            f"agent's p99 run() during a {count:,}-lesson import",
            ms(p99),
            "p99 run() alone",
            ms(p99_alone),
            p99 / p99_alone,
            values={"p99_ms": p99, "alone_ms": p99_alone},
        ),
    ]
