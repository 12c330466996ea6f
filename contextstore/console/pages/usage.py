"""Lesson usage: how often the runs of a range matched and included each lesson, and the
active lessons no run included — one ``MetricsRepository.lesson_stats`` call, counted in SQL
from the runs' traces, the figures ``contextstore lessons stats`` prints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from contextstore.console.ranges import CHOICES, parse_range
from contextstore.console.web import Visitor, console, page, render
from contextstore.errors import ValidationError


async def _usage(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    now = datetime.fromtimestamp(console(request).clock(), UTC)
    namespace = visitor.principal.namespace
    context: dict[str, Any] = {"choices": CHOICES, "namespace": namespace}
    try:
        chosen = parse_range(
            params.get("range", ""), params.get("since", ""), params.get("until", ""), now
        )
    except ValidationError as exc:
        context.update(error=str(exc), range=None, stats=None)
        return render(request, "usage.html", context, status=422, visitor=visitor)
    backends = console(request).backends()
    stats = await backends.call(
        lambda: backends.metrics.lesson_stats(
            since=chosen.since, until=chosen.until, namespace=namespace
        )
    )
    context.update(error=None, range=chosen, stats=stats)
    return render(request, "usage.html", context, visitor=visitor)


usage = page(_usage)
