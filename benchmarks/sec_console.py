"""The web console's overview over a million runs, against the metrics report API on them.

One ``contextstore serve`` worker on PostgreSQL, ``ROWS`` metrics rows written by one
``INSERT … SELECT generate_series`` (two seconds apart, so they span about 23 days). The
overview of everything computes the report (overall and per complexity) and the per-bucket
series; the baseline is ``/v1/metrics/report`` over the same rows, the report alone. Requests
alternate between the two; the target is the page's absolute time: under a second.
"""

from __future__ import annotations

import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa

from benchmarks.context import Bench
from benchmarks.report import Row, ms
from benchmarks.sec_service import Served
from benchmarks.timing import percentile, timed_call_ms
from contextstore.apikeys import add_key
from contextstore.store import connect

SECTION = "Web console, PostgreSQL"
NAMESPACE = "console-bench"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')

_ROWS_SQL = sa.text(
    "INSERT INTO query_metrics (recorded_at, namespace, worker, query_hash, complexity, intent, "
    "budget, context_length, chunk_count, lessons_matched, lessons_included, response_ms, "
    "guard_passed, guard_warnings, cache_hit) "
    "SELECT now() - g * interval '2 second', :namespace, 'w-' || (g % 16), md5(g::text), "
    "(ARRAY['low', 'medium', 'high'])[g % 3 + 1], 'factual', 800, 100 + g % 500, 3, g % 5, "
    "g % 3, (g::bigint * 7919 % 100000) / 100.0, g % 11 <> 0, '[]', g % 4 = 0 "
    "FROM generate_series(1, :rows) g"
)


def _signed_in(served: Served, key: str) -> httpx.Client:
    client = httpx.Client(base_url=served.url, timeout=120.0)
    form = client.get("/console/signin")
    token = _CSRF.search(form.text)
    assert token is not None, form.text
    response = client.post("/console/signin", data={"csrf": token.group(1), "key": key})
    if response.status_code != 303:
        raise RuntimeError(f"console sign-in failed: {response.status_code}")
    return client


def run(bench: Bench) -> list[Row]:
    bench.services.require_postgres()
    rows = bench.pick(100_000, 1_000_000)
    url = bench.services.database_url("postgresql", "console")
    bench.say(f"Web console: writing {rows:,} metrics rows")
    with connect(url, "", NAMESPACE) as store:
        store.metrics.count()  # migrates the schema
        with store.sql_engine.begin() as connection:
            connection.execute(_ROWS_SQL, {"namespace": NAMESPACE, "rows": rows})
            connection.exec_driver_sql("ANALYZE query_metrics")
    results: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="cs-bench-console-") as scratch,
        Served(Path(scratch), url, "", 1) as served,
    ):
        key, _ = add_key(served.keys, NAMESPACE, "admin")
        api = httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=120.0
        )
        page = _signed_in(served, key)
        try:
            for label, path in (("everything", "/console/?range=all"),
                                    ("last 7 days", "/console/?range=7d")):  # fmt: skip
                page_ms: list[float] = []
                report_ms: list[float] = []
                since = "" if label == "everything" else "?since=" + _week_ago()
                rounds = bench.pick(3, 7)
                for i in range(rounds + 1):
                    pair = [
                            (page_ms, lambda p=path: page.get(p).raise_for_status()),
                            (report_ms, lambda s=since: api.get(f"/v1/metrics/report{s}")
                             .raise_for_status()),
                        ]  # fmt: skip
                    for sink, call in pair if i % 2 else pair[::-1]:
                        took = timed_call_ms(call)
                        if i:  # the first round warms the caches
                            sink.append(took)
                    bench.say(f"Web console: {label} {i}/{rounds}")
                ours, base = percentile(page_ms, 0.5), percentile(report_ms, 0.5)
                results.append(
                    Row(
                        SECTION,
                        f"overview page, {rows:,} runs, {label}, p50",
                        ms(ours),
                        "/v1/metrics/report on the same rows",
                        ms(base),
                        ours / base,
                        target="< 1 s",
                        met=ours < 1000.0,
                        note="report + per-bucket series, one worker",
                        values={"page_ms": ours, "report_ms": base, "rows": rows},
                    )
                )
        finally:
            api.close()
            page.close()
    return results


def _week_ago() -> str:
    return (datetime.now(UTC) - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
