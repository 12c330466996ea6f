"""An OpenTelemetry span for each HTTP request, when ``engine.tracing.enabled`` is set.

The span (kind SERVER) continues the caller's trace when the request carries a
``traceparent`` header, is named after the route (``POST /v1/run``), and carries the method,
the route, the path and the status; never a header, a body or the query string. The runs a
request makes are its children (``contextstore.engine.tracing``). ``opentelemetry`` is
imported when the server is built with tracing on, never otherwise.
"""

from __future__ import annotations

import inspect
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contextstore.engine.tracing import require_opentelemetry


class HttpTracing:
    """The outermost ASGI layer when tracing is on: one span per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        require_opentelemetry()
        from opentelemetry import propagate, trace

        self.app = app
        self._trace = trace
        self._extract = propagate.extract
        self._tracer = trace.get_tracer("contextstore")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        carrier = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope["path"],
        }
        with self._tracer.start_as_current_span(
            f"{method}",
            context=self._extract(carrier),
            kind=self._trace.SpanKind.SERVER,
            attributes=attributes,
        ) as span:

            async def watch(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(self._trace.StatusCode.ERROR)
                await send(message)

            try:
                await self.app(scope, receive, watch)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")


def without_native_tracing() -> dict[str, Any]:
    """``FastAPI()``'s keyword arguments that turn its own request spans off (recent FastAPI
    makes them whenever a tracer provider is set): ``HttpTracing`` makes one per request,
    for every route (the direct ones too), and only when tracing is enabled."""
    from fastapi import FastAPI

    if "telemetry" in inspect.signature(FastAPI).parameters:
        return {"telemetry": {"tracing": False}}
    return {}
