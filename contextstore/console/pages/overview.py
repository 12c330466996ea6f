"""The overview: how the key's namespace ran over a chosen range, as charts and tables.

Every figure comes from ``MetricsRepository.report`` and ``series`` — the same SQL the
``metrics report`` command and ``/v1/metrics/report`` use — so the page and the command line
agree to the last digit, and the database does the counting whatever the number of rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from contextstore.console import charts
from contextstore.console.ranges import CHOICES, bucket_label, bucket_seconds, parse_range
from contextstore.console.web import Visitor, console, page, render
from contextstore.errors import ValidationError
from contextstore.sql.report import MetricsReport, SeriesPoint


def _percent(rate: float | None) -> float | None:
    return None if rate is None else 100.0 * rate


def _charts(report: MetricsReport, series: tuple[SeriesPoint, ...], bucket: int) -> dict[str, str]:
    labels = [bucket_label(point.bucket_start, bucket) for point in series]
    levels = [row.complexity for row in report.by_complexity]
    return {
        "runs": charts.bar_chart(
            "Runs per bucket", labels, charts.Series("runs", [p.runs for p in series])
        ),
        "latency": charts.line_chart(
            "Response time (ms)",
            labels,
            [
                charts.Series("p50", [p.p50_ms for p in series]),
                charts.Series("p95", [p.p95_ms for p in series]),
            ],
            unit=" ms",
        ),
        "rates": charts.line_chart(
            "Cache hits and guard failures (%)",
            labels,
            [
                charts.Series("cache hits", [_percent(p.cache_hit_rate) for p in series]),
                charts.Series("guard failures", [_percent(p.guard_failure_rate) for p in series]),
            ],
            unit="%",
            top=100.0,
        ),
        "complexity": charts.bar_chart(
            "Runs by complexity",
            levels,
            charts.Series("runs", [row.runs for row in report.by_complexity]),
        ),
    }


async def _overview(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    now = datetime.fromtimestamp(console(request).clock(), UTC)
    try:
        chosen = parse_range(
            params.get("range", ""), params.get("since", ""), params.get("until", ""), now
        )
    except ValidationError as exc:
        context: dict[str, Any] = {"error": str(exc), "choices": CHOICES, "range": None}
        return render(request, "overview.html", context, status=422, visitor=visitor)
    backends = console(request).backends()
    namespace = visitor.principal.namespace

    def read() -> tuple[MetricsReport, tuple[SeriesPoint, ...], int]:
        metrics = backends.metrics
        report = metrics.report(since=chosen.since, until=chosen.until, namespace=namespace)
        first = chosen.since or report.first_recorded_at
        last = chosen.until or report.last_recorded_at
        if chosen.since is not None and chosen.until is None:
            last = now
        bucket = bucket_seconds(first, last)
        series = metrics.series(
            bucket_seconds=bucket, since=chosen.since, until=chosen.until, namespace=namespace
        )
        return report, series, bucket

    report, series, bucket = await backends.call(read)
    context = {
        "range": chosen,
        "choices": CHOICES,
        "report": report,
        "series": series,
        "bucket": bucket,
        "charts": _charts(report, series, bucket),
        "namespace": namespace,
        "percent": _percent,
    }
    return render(request, "overview.html", context, visitor=visitor)


overview = page(_overview)
