"""Namespaces are tenants: a store's metrics are its namespace's, on SQLite and PostgreSQL.

Two namespaces hold different runs. Through the library (``connect`` and ``connect_async``)
and the command line, a tenant's prune, report, count, series, span, groups and lesson
statistics show and touch its own rows only; every namespace is reached only when the
caller asks (``all_namespaces=True``, ``--all-namespaces``). Before, a store bound to
``tenant-a`` pruned ``tenant-b``'s rows and reported the whole database.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from contextstore import connect, connect_async
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.metrics import RunTrace
from contextstore.errors import ValidationError
from contextstore.interfaces.cli import app
from tests.aio import Blocking
from tests.factories import make_metric

A, B = "tenant-a", "tenant-b"
AT = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def seed(engine: sa.Engine) -> None:
    """A: three runs (10, 20, 30 ms) including lesson ops.a; B: two (500, 700 ms), ops.b;
    written through a repository bound to no namespace."""
    MetricsRepository(engine).record_many(
        [
            make_metric(
                AT + timedelta(minutes=i),
                namespace=A,
                worker=f"a-{i}",
                response_ms=10.0 * (i + 1),
                trace=RunTrace(lessons_matched=("ops.a",), lessons_included=("ops.a",)),
            )
            for i in range(3)
        ]
        + [
            make_metric(
                AT + timedelta(minutes=10 + i),
                namespace=B,
                worker="b",
                response_ms=500.0 + 200 * i,
                trace=RunTrace(lessons_matched=("ops.b",), lessons_included=("ops.b",)),
            )
            for i in range(2)
        ]
    )


def counted(engine: sa.Engine) -> dict[str, int]:
    """Rows per namespace, read in SQL beside the library."""
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT namespace, count(*) FROM query_metrics GROUP BY namespace")
        )
        return {namespace: int(count) for namespace, count in rows}


@contextmanager
def tenant_metrics(flavour: str, url: str, namespace: str) -> Iterator[Any]:
    """The metrics of ``connect(namespace=…)``, or of ``connect_async`` driven blocking."""
    if flavour == "sync":
        with connect(url, "", namespace) as store:
            yield store.metrics
        return
    with asyncio.Runner() as runner:
        store = connect_async(url, "", namespace)
        try:
            yield Blocking(store.metrics, runner)
        finally:
            runner.run(store.aclose())


def test_the_reported_prune_leaves_the_other_tenants_rows(database_url: str) -> None:
    """The reproduction: ``connect(namespace="tenant-a").metrics.prune(timedelta(0))``
    deleted tenant B's rows (3 → 0) and ``report()`` counted every namespace."""
    engine = create_database_engine(database_url)
    try:
        seed(engine)
        with connect(database_url, "", A) as store:
            assert store.metrics.report().runs == 3
            assert store.metrics.prune(timedelta(0)) == 3
        assert counted(engine) == {B: 2}
    finally:
        engine.dispose()


def test_a_tenant_reads_and_prunes_only_its_own_rows(database_url: str, flavour: str) -> None:
    engine = create_database_engine(database_url)
    try:
        seed(engine)
        with tenant_metrics(flavour, database_url, A) as metrics:
            assert metrics.namespace == A
            report = metrics.report(by="worker")
            assert (report.namespace, report.runs, report.p50_ms) == (A, 3, 20.0)
            assert [(group.key, group.runs) for group in report.groups] == [
                ("a-0", 1),
                ("a-1", 1),
                ("a-2", 1),
            ]
            assert [row.runs for row in report.by_complexity] == [3, 0, 0]
            assert metrics.count() == 3
            assert metrics.count(namespace=A) == 3  # naming its own namespace is allowed
            assert metrics.span() == (AT, AT + timedelta(minutes=2))
            assert [p.runs for p in metrics.series(bucket_seconds=86400 * 365)] == [3]
            assert [g.key for g in metrics.groups("lesson")] == ["ops.a"]
            stats = metrics.lesson_stats()
            assert (stats.namespace, stats.runs) == (A, 3)
            assert [(u.entity_id, u.runs_included) for u in stats.lessons] == [("ops.a", 3)]

            # Another tenant's rows only when asked for: one, or every namespace.
            assert metrics.report(all_namespaces=True).runs == 5
            assert metrics.report(all_namespaces=True).namespace is None
            assert metrics.report(namespace=B, all_namespaces=True).p50_ms == 600.0
            assert metrics.lesson_stats(all_namespaces=True).runs == 5
            assert metrics.count(namespace=B, all_namespaces=True) == 2
            for call in (
                lambda: metrics.report(namespace=B),
                lambda: metrics.count(namespace=B),
                lambda: metrics.lesson_stats(namespace=B),
                lambda: metrics.series(namespace=B),
                lambda: metrics.span(namespace=B),
                lambda: metrics.groups("worker", namespace=B),
                lambda: metrics.prune(timedelta(0), B),
                lambda: metrics.record(make_metric(AT, namespace=B)),
                lambda: metrics.record_many([make_metric(AT, namespace=A)] * 2
                                            + [make_metric(AT, namespace=B)]),
            ):  # fmt: skip
                with pytest.raises(ValidationError) as refused:
                    call()
                assert refused.value.field == "namespace"
                assert "all_namespaces=True" in str(refused.value) or "records" in str(
                    refused.value
                )
            with pytest.raises(ValidationError) as refused:
                metrics.report(all_namespaces="yes")
            assert refused.value.field == "all_namespaces"
            assert counted(engine) == {A: 3, B: 2}  # nothing written, nothing deleted

            metrics.record(make_metric(AT + timedelta(minutes=5), namespace=A))
            assert counted(engine) == {A: 4, B: 2}
            assert metrics.prune(timedelta(0)) == 4
            assert counted(engine) == {B: 2}
            assert metrics.report().runs == 0
            assert metrics.prune(timedelta(0), all_namespaces=True) == 2
            assert counted(engine) == {}
    finally:
        engine.dispose()


def test_an_unbound_repository_spans_the_database_as_before(engine: sa.Engine) -> None:
    seed(engine)
    metrics = MetricsRepository(engine)
    assert metrics.namespace is None
    assert metrics.report().runs == 5
    assert metrics.report(namespace=B).runs == 2
    assert metrics.prune(timedelta(0), B) == 2
    assert counted(engine) == {A: 3}
    with pytest.raises(ValidationError) as refused:
        MetricsRepository(engine, namespace="")
    assert refused.value.field == "namespace"


# -- the command line ------------------------------------------------------------------------


def cli(database_url: str, *args: str) -> Any:
    result = CliRunner().invoke(
        app, [*args, "--json", "--database-url", database_url], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.usefixtures("clean_environment")
def test_the_command_line_reports_and_prunes_one_tenant_unless_asked_for_all(
    database_url: str,
) -> None:
    engine = create_database_engine(database_url)
    try:
        seed(engine)
        MetricsRepository(engine).record(make_metric(AT, namespace="default", response_ms=1.0))
        # No --namespace and no CONTEXTSTORE_NAMESPACE: the default namespace, not all.
        default = cli(database_url, "metrics", "report")
        assert (default["namespace"], default["runs"]) == ("default", 1)
        named = cli(database_url, "metrics", "report", "--namespace", A)
        assert (named["namespace"], named["runs"], named["p50_ms"]) == (A, 3, 20.0)
        every = cli(database_url, "metrics", "report", "--all-namespaces")
        assert (every["namespace"], every["runs"]) == (None, 6)
        stats = cli(database_url, "lessons", "stats", "--namespace", B)
        assert (stats["namespace"], stats["runs"]) == (B, 2)
        assert [u["entity_id"] for u in stats["lessons"]] == ["ops.b"]
        assert cli(database_url, "lessons", "stats")["runs"] == 1

        dry = cli(database_url, "metrics", "prune", "--older-than", "1m", "--dry-run")
        assert (dry["namespace"], dry["would_delete"]) == ("default", 1)
        pruned = cli(database_url, "metrics", "prune", "--older-than", "1m", "--namespace", A)
        assert (pruned["namespace"], pruned["deleted"]) == (A, 3)
        assert counted(engine) == {B: 2, "default": 1}
        assert cli(database_url, "metrics", "prune", "--older-than", "1m")["deleted"] == 1
        assert counted(engine) == {B: 2}
        everything = cli(database_url, "metrics", "prune", "--older-than", "1m", "--all-namespaces")
        assert (everything["namespace"], everything["deleted"]) == (None, 2)
        assert counted(engine) == {}
    finally:
        engine.dispose()


@pytest.mark.usefixtures("clean_environment")
def test_namespace_and_all_namespaces_together_are_one_usage_line(database_url: str) -> None:
    for args in (["metrics", "report"], ["metrics", "prune", "--older-than", "1m"]):
        result = CliRunner().invoke(
            app, [*args, "--namespace", A, "--all-namespaces", "--database-url", database_url]
        )
        assert result.exit_code == 2, result.output
        assert result.stderr == "error: --namespace and --all-namespaces contradict each other\n"
