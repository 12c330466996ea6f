"""Fleet throughput: 1, 2 and 4 agent processes sharing PostgreSQL + Redis.

Uses the ``contextstore fleet`` machinery itself (spawned processes, a start signal once all
are ready, runs read back from SQL). Each fleet size gets a fresh Redis namespace, so every
size starts from a cold cache and the hit rates are comparable.
"""

from __future__ import annotations

from benchmarks.context import Bench
from benchmarks.report import Row, rate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.repository import LessonRepository
from contextstore.interfaces.fleet import FleetSpec, new_fleet_id, run_fleet, worker_prefix
from contextstore.sample_data import load_lessons

SECTION = "Fleet, PostgreSQL + Redis"


def run(bench: Bench) -> list[Row]:
    bench.services.require_postgres()
    bench.services.require_redis()
    bench.say("fleet: preparing the shared database")
    url = bench.services.database_url("postgresql", "fleet")
    engine = bench.services.engine(url)
    LessonRepository(engine).import_records(load_lessons())
    metrics = MetricsRepository(engine)
    queries = bench.pick(40, 150)
    figures: dict[int, tuple[float, float, int]] = {}
    for workers in (1, 2, 4):
        spec = FleetSpec(
            fleet_id=new_fleet_id(),
            database_url=url,
            redis_url=bench.services.redis_url,
            namespace=bench.services.namespace(f"fleet{workers}"),
            queries=queries,
        )
        bench.say(f"fleet: {workers} processes × {queries} queries (starting)")

        def progress(_index: int, _worker: object, n: int = workers) -> None:
            bench.say(f"fleet: {n} processes × {queries} queries (running)")

        outcome = run_fleet(spec, workers, progress)
        if outcome.failures:
            failed = outcome.failures[0]
            raise RuntimeError(f"fleet worker {failed.name} failed: {failed.error}")
        report = metrics.report(worker_prefix=worker_prefix(spec.fleet_id))
        figures[workers] = (
            report.runs / outcome.wall_seconds,
            report.cache_hit_rate or 0.0,
            report.runs,
        )
    base_rate, base_hits, base_runs = figures[1]
    rows = [
        Row(
            SECTION,
            f"{workers} process{'es' if workers > 1 else ''} × {queries} queries",
            rate(per_second).replace("/s", "runs/s"),
            "1 process" if workers > 1 else "",
            rate(base_rate).replace("/s", "runs/s") if workers > 1 else "",
            per_second / base_rate if workers > 1 else None,
            note=f"{runs:,} runs in SQL, cache hit rate {hits:.0%}",
            values={"runs_per_second": per_second, "hit_rate": hits, "runs": runs},
        )
        for workers, (per_second, hits, runs) in figures.items()
    ]
    del base_hits, base_runs
    return rows
