"""The overview: how the key's namespace ran over a chosen range, as charts and tables (its
metrics repository is bound to that namespace, so no figure counts another tenant's runs);
with an owner key and ``?namespaces=all``, how every namespace ran.

Every figure comes from ``MetricsRepository.report`` and ``series`` — the same SQL the
``metrics report`` command and ``/v1/metrics/report`` use — so the page and the command line
agree to the last digit, and the database does the counting whatever the number of rows.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from contextstore.backends.sql.metrics.report import (
    GROUPINGS,
    MetricsFigures,
    MetricsFilter,
    MetricsReport,
    SeriesPoint,
)
from contextstore.errors import ValidationError
from contextstore.interfaces.console import charts
from contextstore.interfaces.console.ranges import (
    CHOICES,
    bucket_label,
    bucket_seconds,
    parse_range,
)
from contextstore.interfaces.console.web import Visitor, console, every_namespace, page, render

CHART_GROUPS = 12
"""Most groups one chart draws (the table below it lists them all)."""


def _percent(rate: float | None) -> float | None:
    return None if rate is None else 100.0 * rate


def _groups(report: MetricsReport, by: str) -> list[tuple[str, MetricsFigures]]:
    """(key, figures) per group, in the report's order (complexity levels, else most runs)."""
    if by == "complexity":
        return [(row.complexity, row) for row in report.by_complexity]
    return [(row.key, row) for row in report.groups]


def _charts(
    report: MetricsReport,
    series: tuple[SeriesPoint, ...],
    bucket: int,
    by: str,
    groups: list[tuple[str, MetricsFigures]],
) -> dict[str, str]:
    labels = [bucket_label(point.bucket_start, bucket) for point in series]
    shown = groups[:CHART_GROUPS]
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
        "groups": charts.hbar_chart(
            f"Runs by {by}",
            [key for key, _ in shown],
            charts.Series("runs", [figures.runs for _, figures in shown]),
        ),
    }


async def _overview(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    now = datetime.fromtimestamp(console(request).clock(), UTC)
    by = params.get("by", "") or "complexity"
    every = every_namespace(request, visitor)
    if isinstance(every, Response):
        return every
    try:
        if by not in GROUPINGS:
            raise ValidationError("by", f"{by!r} is not one of {', '.join(GROUPINGS)}")
        chosen = parse_range(
            params.get("range", ""), params.get("since", ""), params.get("until", ""), now
        )
    except ValidationError as exc:
        context: dict[str, Any] = {
            "error": str(exc),
            "choices": CHOICES,
            "range": None,
            "groupings": GROUPINGS,
            "by": by,
            "every": every,
        }
        return render(request, "overview.html", context, status=422, visitor=visitor)
    backends = console(request).backends()
    own = visitor.principal.namespace
    metrics = backends.metrics(own)
    # ``None`` with ``all_namespaces``: every namespace's runs.
    namespace = None if every else own
    # The bucket needs the range's ends; open ends are read from the index (instant), so
    # the report, the series and the groups can then run side by side. (Separate
    # transactions: while agents write, the charts and the groups may hold a few runs the
    # tiles do not.)
    first, last = chosen.since, chosen.until
    if first is not None and last is None:
        last = now
    if first is None:
        first, last_run = await backends.call(
            lambda: metrics.span(namespace=namespace, all_namespaces=every)
        )
        last = last or last_run
    bucket = bucket_seconds(first, last)
    wanted = MetricsFilter(since=chosen.since, until=chosen.until, namespace=namespace)
    # Grouped by complexity, the report's own by_complexity serves; any other grouping is
    # read beside the report and the series, in a transaction of its own (as the series
    # is), so the three statements run at once rather than one after the other, and the
    # report then skips its levels (each level's percentiles are a walk or a sort of their
    # own).
    levels = by == "complexity"
    reads: list[Any] = [
        backends.call(lambda: metrics.report(wanted, levels=levels, all_namespaces=every)),
        backends.call(lambda: metrics.series(wanted, bucket_seconds=bucket, all_namespaces=every)),
    ]
    if not levels:
        reads.append(backends.call(lambda: metrics.groups(by, wanted, all_namespaces=every)))
    report, series, *grouped = await asyncio.gather(*reads)
    if grouped:
        report = replace(report, by=by, groups=grouped[0])
    groups = _groups(report, by)
    context = {
        "range": chosen,
        "groupings": GROUPINGS,
        "by": by,
        "groups": groups,
        "choices": CHOICES,
        "report": report,
        "series": series,
        "bucket": bucket,
        "charts": _charts(report, series, bucket, by, groups),
        "namespace": own,
        "every": every,
        "percent": _percent,
    }
    return render(request, "overview.html", context, visitor=visitor)


overview = page(_overview)
