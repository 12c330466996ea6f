"""The web console's pages over a million runs, on SQLite and on PostgreSQL.

Per database, one ``contextstore serve`` worker over ``ROWS`` metrics rows written by one
``INSERT … SELECT`` (two seconds apart, so they span about 23 days; two in three runs name
lessons in their traces, 40 lessons in all). Each page that reads metrics is timed at every
range it offers: the overview (report, per-bucket series and the chart by complexity), the
overview grouped by lesson and by worker, and the lesson usage page. The baseline is the
HTTP API call that reads the same figures on the same rows (``/v1/metrics/report`` or
``/v1/lessons/stats``), the bare report without the page's series; requests alternate
between the two. The target is the page's absolute time: under a second.

PostgreSQL's tables (the runs and each run's lessons, written by its triggers) are timed
twice: written, analyzed and not vacuumed (the worst case, right after a burst of writes,
before autovacuum comes by), then vacuumed (as autovacuum leaves them a minute later:
revision 0010 has it visit both tables after each 1% of new rows). Their all-visible share
is noted on each row.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.sec_service import Served
from benchmarks.timing import percentile, timed_call_ms
from contextstore.interfaces.apikeys import add_key
from contextstore.store.sync import connect

NAMESPACE = "console-bench"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_COLUMNS = (
    "recorded_at, namespace, worker, query_hash, complexity, intent, budget, context_length, "
    "chunk_count, lessons_matched, lessons_included, response_ms, guard_passed, guard_warnings, "
    "cache_hit, lessons_matched_ids, lessons_included_ids"
)
# Row g: recorded 2·g seconds ago; g % 3 lessons (of 40) matched and included.
_ROWS_SQL = {
    "postgresql": sa.text(
        f"INSERT INTO query_metrics ({_COLUMNS}) "
        "SELECT now() - g * interval '2 second', :namespace, 'w-' || (g % 16), md5(g::text), "
        "(ARRAY['low', 'medium', 'high'])[g % 3 + 1], 'factual', 800, 100 + g % 500, 3, "
        "g % 3, g % 3, (g::bigint * 7919 % 100000) / 100.0, g % 11 <> 0, '[]', g % 4 = 0, "
        "lessons, lessons FROM generate_series(1, :rows) g, LATERAL (SELECT CASE g % 3 "
        "WHEN 0 THEN '[]'::jsonb WHEN 1 THEN jsonb_build_array('L-' || (g % 40)) "
        "ELSE jsonb_build_array('L-' || (g % 40), 'L-' || ((g + 1) % 40)) END AS lessons) t"
    ),
    "sqlite": sa.text(
        "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :rows) "
        f"INSERT INTO query_metrics ({_COLUMNS}) "
        "SELECT strftime('%Y-%m-%d %H:%M:%S.000000', 'now', (-2 * g) || ' seconds'), :namespace, "
        "'w-' || (g % 16), printf('%032x', g), "
        "CASE g % 3 WHEN 0 THEN 'low' WHEN 1 THEN 'medium' ELSE 'high' END, 'factual', 800, "
        "100 + g % 500, 3, g % 3, g % 3, (g * 7919 % 100000) / 100.0, g % 11 <> 0, '[]', "
        "g % 4 = 0, lessons, lessons FROM (SELECT g, CASE g % 3 WHEN 0 THEN '[]' "
        "WHEN 1 THEN json_array('L-' || (g % 40)) "
        "ELSE json_array('L-' || (g % 40), 'L-' || ((g + 1) % 40)) END AS lessons FROM s)"
    ),
}
_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _signed_in(served: Served, key: str) -> httpx.Client:
    client = httpx.Client(base_url=served.url, timeout=300.0)
    form = client.get("/console/signin")
    token = _CSRF.search(form.text)
    assert token is not None, form.text
    response = client.post("/console/signin", data={"csrf": token.group(1), "key": key})
    if response.status_code != 303:
        raise RuntimeError(f"console sign-in failed: {response.status_code}")
    return client


def _ranges(now: datetime) -> list[tuple[str, str, str]]:
    """(label, the page's range parameters, the API's since/until parameters)."""

    def instant(moment: datetime) -> str:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    start = (now - timedelta(days=15)).date()
    end = (now - timedelta(days=5)).date()
    midnight = datetime(start.year, start.month, start.day, tzinfo=UTC)
    dates = f"since={instant(midnight)}&until={instant(midnight + (end - start))}"
    return [
        ("everything", "range=all", ""),
        ("last 30 days", "range=30d", "since=" + instant(now - timedelta(days=30))),
        ("last 7 days", "range=7d", "since=" + instant(now - timedelta(days=7))),
        ("last 24 hours", "range=24h", "since=" + instant(now - timedelta(days=1))),
        (f"{start} to {end}", f"range=dates&since={start}&until={end}", dates),
    ]


def _pages(now: datetime) -> list[tuple[str, str, str]]:
    """(name, page path, baseline API path) for every metrics page at every range."""
    pages = []
    for label, page, api in _ranges(now):
        pages.append((f"overview, {label}", f"/console/?{page}", f"/v1/metrics/report?{api}"))
    for label, page, api in _ranges(now)[::2]:
        pages.append(
            (
                f"overview by lesson, {label}",
                f"/console/?{page}&by=lesson",
                f"/v1/metrics/report?{api}&by=lesson",
            )
        )
    pages.append(
        (
            "overview by worker, everything",
            "/console/?range=all&by=worker",
            "/v1/metrics/report?by=worker",
        )
    )
    for label, page, api in _ranges(now)[::2]:
        usage = (f"lesson usage, {label}", f"/console/usage?{page}", f"/v1/lessons/stats?{api}")
        pages.append(usage)
    return pages


def _write_rows(url: str, dialect: str, rows: int) -> str:
    """Writes the rows; returns PostgreSQL's all-visible share of the table as a note."""
    with connect(url, "", NAMESPACE) as store:
        store.metrics.count()  # migrates the schema
        with store.sql_engine.begin() as connection:
            if dialect == "postgresql":
                # Autovacuum stays away until the second pass, so the first one times the
                # tables exactly as written: it would come by within the run otherwise.
                for table in ("query_metrics", "query_metric_lessons"):
                    connection.exec_driver_sql(
                        f"ALTER TABLE {table} SET (autovacuum_enabled = off)"
                    )
            connection.execute(_ROWS_SQL[dialect], {"namespace": NAMESPACE, "rows": rows})
            # Both tables a report reads: the runs, and each run's lessons (their triggers
            # wrote them), as autovacuum's ANALYZE would after such a batch.
            connection.exec_driver_sql("ANALYZE query_metrics")
            connection.exec_driver_sql("ANALYZE query_metric_lessons")
            if dialect != "postgresql":
                return ""
            visible, pages = connection.exec_driver_sql(
                "SELECT sum(relallvisible), sum(relpages) FROM pg_class "
                "WHERE relname IN ('query_metrics', 'query_metric_lessons')"
            ).one()
    return f"{100 * visible / max(pages, 1):.0f}% of pages all-visible"


def _backend(bench: Bench, dialect: str) -> list[Row]:
    rows = bench.pick(100_000, 1_000_000)
    name = _NAMES[dialect]
    url = bench.services.database_url(dialect, "console")
    bench.say(f"Web console, {name}: writing {rows:,} metrics rows")
    visibility = _write_rows(url, dialect, rows)
    results = _pages_timed(bench, url, name, visibility, rows)
    if dialect == "postgresql":
        bench.say(f"Web console, {name}: VACUUM, as autovacuum would")
        visibility = _vacuumed(url)
        results += _pages_timed(bench, url, f"{name}, vacuumed", visibility, rows)
    return results


def _vacuumed(url: str) -> str:
    """VACUUM both tables (revision 0010's autovacuum would, a minute after such a batch);
    their all-visible share as a note."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("VACUUM (ANALYZE) query_metrics, query_metric_lessons")
            visible, pages = connection.exec_driver_sql(
                "SELECT sum(relallvisible), sum(relpages) FROM pg_class "
                "WHERE relname IN ('query_metrics', 'query_metric_lessons')"
            ).one()
    finally:
        engine.dispose()
    return f"{100 * visible / max(pages, 1):.0f}% of pages all-visible"


def _pages_timed(bench: Bench, url: str, name: str, visibility: str, rows: int) -> list[Row]:
    results: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="cs-bench-console-") as scratch,
        Served(Path(scratch), url, "", 1) as served,
    ):
        key, _ = add_key(served.keys, NAMESPACE, "admin")
        api = httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=300.0
        )
        page = _signed_in(served, key)
        try:
            for label, path, baseline in _pages(datetime.now(UTC)):
                page_ms: list[float] = []
                api_ms: list[float] = []
                rounds = bench.pick(2, 5)
                for i in range(rounds + 1):
                    pair: list[tuple[list[float], Callable[[], object]]] = [
                        (page_ms, lambda p=path: page.get(p).raise_for_status()),
                        (api_ms, lambda b=baseline: api.get(b).raise_for_status()),
                    ]
                    for sink, call in pair if i % 2 else pair[::-1]:
                        took = timed_call_ms(call)
                        if i:  # the first round warms the caches
                            sink.append(took)
                    bench.say(f"Web console, {name}: {label} {i}/{rounds}")
                ours, base = percentile(page_ms, 0.5), percentile(api_ms, 0.5)
                results.append(
                    Row(
                        f"Web console, {name}",
                        f"{label} page, {rows:,} runs, p50",
                        ms(ours),
                        baseline.split("?")[0] + " on the same rows",
                        ms(base),
                        ours / base,
                        target="< 1 s",
                        met=ours < 1000.0,
                        note=", ".join(filter(None, ["one worker", visibility])),
                        values={"page_ms": ours, "api_ms": base, "rows": rows},
                    )
                )
        finally:
            api.close()
            page.close()
    return results


def run(bench: Bench) -> list[Row]:
    bench.services.require_postgres()
    return _backend(bench, "sqlite") + _backend(bench, "postgresql")
