"""Lesson usage: how often the runs of a range matched and included each lesson, and the
active lessons no run included — one ``MetricsRepository.lesson_stats`` call, counted in SQL
from the runs' traces, the figures ``contextstore lessons stats`` prints: the key's namespace,
or every namespace with an owner key and ``?namespaces=all``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from contextstore.errors import ValidationError
from contextstore.interfaces.console.ranges import CHOICES, parse_range
from contextstore.interfaces.console.web import Visitor, console, every_namespace, page, render


async def _usage(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    now = datetime.fromtimestamp(console(request).clock(), UTC)
    namespace = visitor.principal.namespace
    every = every_namespace(request, visitor)
    if isinstance(every, Response):
        return every
    context: dict[str, Any] = {"choices": CHOICES, "namespace": namespace, "every": every}
    try:
        chosen = parse_range(
            params.get("range", ""), params.get("since", ""), params.get("until", ""), now
        )
    except ValidationError as exc:
        context.update(error=str(exc), range=None, stats=None)
        return render(request, "usage.html", context, status=422, visitor=visitor)
    backends = console(request).backends()
    metrics = backends.metrics(namespace)
    stats = await backends.call(
        lambda: metrics.lesson_stats(
            since=chosen.since,
            until=chosen.until,
            namespace=None if every else namespace,
            all_namespaces=every,
        )
    )
    context.update(error=None, range=chosen, stats=stats)
    return render(request, "usage.html", context, visitor=visitor)


usage = page(_usage)
