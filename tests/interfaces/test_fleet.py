"""``interfaces.fleet``: the library that starts and watches a fleet's worker processes.

The command line on top of it is tested in ``test_cli_fleet.py``; here the library is called
directly, as ``benchmarks/sec_fleet.py`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from contextstore.errors import ConfigurationError
from contextstore.interfaces.fleet import (
    FleetSpec,
    WorkerOutcome,
    load_sample_corpus,
    new_fleet_id,
    run_fleet,
    shareable_database_url,
    worker_name,
    worker_prefix,
)
from contextstore.sample_data import corpus_lines, load_lessons
from contextstore.store.sync import connect


def test_worker_names_share_the_fleet_prefix() -> None:
    fleet_id = new_fleet_id()
    assert len(fleet_id) == 8
    assert worker_prefix(fleet_id) == f"fleet-{fleet_id}-"
    assert worker_name(fleet_id, 3) == f"fleet-{fleet_id}-3"


def test_shareable_database_url_makes_sqlite_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert shareable_database_url("sqlite:///fleet.db") == f"sqlite:///{tmp_path / 'fleet.db'}"
    postgres = "postgresql+psycopg://user:secret@db:5432/fleet"
    assert shareable_database_url(postgres) == postgres
    uri = "sqlite:///file:fleet.db?uri=true"
    assert shareable_database_url(uri) == uri


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:x?mode=memory&uri=true"]
)
def test_shareable_database_url_refuses_in_memory_sqlite(url: str) -> None:
    with pytest.raises(ConfigurationError, match="in-memory SQLite"):
        shareable_database_url(url)


@pytest.mark.slow
def test_run_fleet_counts_every_run_in_sql(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    spec = FleetSpec(
        fleet_id=new_fleet_id(), database_url=url, redis_url=None, namespace="ns", queries=5
    )
    seen: list[tuple[int, str]] = []

    def on_progress(index: int, worker: WorkerOutcome) -> None:
        seen.append((index, worker.name))

    with connect(url, "", "ns") as store:
        store.lessons.import_records(load_lessons())
        outcome = run_fleet(spec, 2, on_progress)
        count = store.metrics.count(worker_prefix=worker_prefix(spec.fleet_id))

    assert outcome.fleet_id == spec.fleet_id
    assert outcome.failures == []
    assert [(w.name, w.runs, w.finished) for w in outcome.workers] == [
        (worker_name(spec.fleet_id, 0), 5, True),
        (worker_name(spec.fleet_id, 1), 5, True),
    ]
    assert outcome.runs == 10
    assert outcome.wall_seconds > 0
    assert count == 10
    # Each worker's final report reaches the callback, from this process.
    assert {(0, worker_name(spec.fleet_id, 0)), (1, worker_name(spec.fleet_id, 1))} <= set(seen)


@pytest.mark.slow
def test_run_fleet_records_a_failing_worker_instead_of_raising(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'fleet.db'}"  # the directory does not exist
    spec = FleetSpec(
        fleet_id=new_fleet_id(), database_url=url, redis_url=None, namespace="ns", queries=3
    )
    outcome = run_fleet(spec, 1)
    assert [worker.name for worker in outcome.failures] == [worker_name(spec.fleet_id, 0)]
    assert outcome.failures[0].error
    assert "\n" not in (outcome.failures[0].error or "")
    assert outcome.runs == 0


@pytest.mark.parametrize("workers", [0, -1, 65, 100_000, True, 2.0])
def test_run_fleet_refuses_a_worker_count_before_starting_any(
    tmp_path: Path, workers: object
) -> None:
    from contextstore.errors import ValidationError
    from contextstore.interfaces.fleet import FleetSpec, new_fleet_id

    spec = FleetSpec(new_fleet_id(), f"sqlite:///{tmp_path / 'f.db'}", None, "ns", 1)
    with pytest.raises(ValidationError) as raised:
        run_fleet(spec, workers)  # type: ignore[arg-type]
    assert raised.value.field == "workers"


def chunks_retrieved(url: str, fleet_id: str) -> list[int]:
    """The chunk count of each run of the fleet, as SQL recorded it."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    sa.text("SELECT chunk_count FROM query_metrics WHERE worker LIKE :prefix"),
                    {"prefix": f"{worker_prefix(fleet_id)}%"},
                ).scalars()
            )
    finally:
        engine.dispose()


@pytest.mark.slow
def test_the_workers_retrieve_from_the_namespaces_knowledge_base(tmp_path: Path) -> None:
    """An empty knowledge base gives every run no chunk (no sample retriever of their own);
    once the sample corpus is loaded, into that namespace alone, the runs find passages."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    empty = FleetSpec(new_fleet_id(), url, None, "ns", 4)
    loaded = FleetSpec(new_fleet_id(), url, None, "ns", 4)
    with connect(url, "", "ns") as store:
        assert run_fleet(empty, 1).failures == []
        first = load_sample_corpus(store)
        again = load_sample_corpus(store)
        assert run_fleet(loaded, 1).failures == []
    with connect(url, "", "other") as elsewhere:
        assert len(elsewhere.knowledge.list()) == 0
    assert chunks_retrieved(url, empty.fleet_id) == [0, 0, 0, 0]
    found = chunks_retrieved(url, loaded.fleet_id)
    assert len(found) == 4 and all(count > 0 for count in found), found
    assert first.added == len(corpus_lines()) and first.unchanged == 0
    assert (again.added, again.updated, again.unchanged) == (0, 0, len(corpus_lines()))
