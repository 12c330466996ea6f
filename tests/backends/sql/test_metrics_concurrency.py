"""Four real processes write metrics into one SQLite file at once.

Each child opens its own engine (as separate agent processes would), waits for a shared start
signal so the writes overlap, records 250 metrics one ``record`` call at a time, and sends
back any exception it saw — so a "database is locked" surfacing in any child fails the test.
"""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.metrics import QueryMetric

PROCESSES = 4
PER_PROCESS = 250
T0 = datetime(2026, 3, 1, tzinfo=UTC)

pytestmark = pytest.mark.slow


def _writer(url: str, worker: str, start: Any, results: Any) -> None:
    """Child process body: record PER_PROCESS metrics, report ``(worker, error or None)``."""
    try:
        engine = create_database_engine(url)
        repository = MetricsRepository(engine)
        if not start.wait(60):
            raise TimeoutError("the start signal never came")
        for index in range(PER_PROCESS):
            repository.record(
                QueryMetric(
                    recorded_at=T0 + timedelta(milliseconds=index),
                    namespace="fleet",
                    worker=worker,
                    query_hash=f"{index:032x}",
                    complexity=("low", "medium", "high")[index % 3],
                    intent="factual",
                    budget=800,
                    context_length=index,
                    chunk_count=1,
                    lessons_matched=2,
                    lessons_included=1,
                    response_ms=float(index),
                    guard_passed=index % 7 != 0,
                    cache_hit=False,
                )
            )
        engine.dispose()
    except BaseException:
        results.put((worker, traceback.format_exc()))
        return
    results.put((worker, None))


def test_four_processes_record_into_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    migrate(url)
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    workers = [f"agent-{number}" for number in range(PROCESSES)]
    children = [
        context.Process(target=_writer, args=(url, worker, start, results)) for worker in workers
    ]
    for child in children:
        child.start()
    try:
        start.set()
        reports: dict[str, str | None] = {}
        for _ in children:
            worker, error = results.get(timeout=180)
            reports[worker] = error
    except queue.Empty:
        pytest.fail(f"a writer process never reported back; got {sorted(reports)}")
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()

    failures = {worker: error for worker, error in reports.items() if error is not None}
    assert failures == {}, "\n".join(f"{w}:\n{e}" for w, e in failures.items())
    assert [child.exitcode for child in children] == [0] * PROCESSES

    engine = create_database_engine(url)
    try:
        metrics = MetricsRepository(engine)
        assert metrics.count() == PROCESSES * PER_PROCESS
        for worker in workers:
            assert metrics.count(worker_prefix=worker) == PER_PROCESS
        with engine.connect() as connection:
            distinct = connection.execute(
                sa.text("SELECT count(DISTINCT worker || ':' || query_hash) FROM query_metrics")
            ).scalar_one()
        assert distinct == PROCESSES * PER_PROCESS  # every record once, none lost or doubled
        report = metrics.report(namespace="fleet")
        assert report.runs == PROCESSES * PER_PROCESS
        assert report.p50_ms == pytest.approx(124.5)  # 0..249 four times over
    finally:
        engine.dispose()
