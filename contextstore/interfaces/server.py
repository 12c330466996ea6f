"""``create_app()``: the ASGI application ``contextstore serve`` runs, the HTTP API and the
web console side by side, behind one access log.

uvicorn (with uvloop and httptools) runs it: the reference ASGI server, which starts several
worker processes itself and shuts down gracefully on SIGTERM (it stops accepting, lets
requests in flight finish, then runs the lifespan's shutdown, which closes every store).
``create_app`` takes no arguments when a server imports it as a factory; it then reads
``ServiceSettings.from_env()``.

``/mcp`` is the MCP server over streamable HTTP (``contextstore.interfaces.mcp.http``), behind
the same keys; without the ``mcp`` extra it answers 404 naming the extra.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from starlette.types import ASGIApp, Receive, Scope, Send

from contextstore.errors import MissingExtraError
from contextstore.interfaces.apikeys import KeyRing
from contextstore.interfaces.console import build_console, with_console
from contextstore.interfaces.mcp import mcp_endpoint
from contextstore.interfaces.service.app import build_api, guarded
from contextstore.interfaces.sql_keys import key_store
from contextstore.interfaces.web.errors import error_bytes
from contextstore.interfaces.web.middleware import AccessLog
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry

__all__ = ["create_app"]


def create_app(settings: ServiceSettings | None = None) -> ASGIApp:
    """The whole server: (with tracing on, a span per request →) access log → the console
    (``/``, ``/console/…``, with its own sign-in), the MCP endpoint (``/mcp``) or the API
    (bearer keys, see ``guarded``)."""
    settings = settings or ServiceSettings.from_env()
    keys = KeyRing(key_store(settings.keys_file, settings.store.database_url, required=True))
    lifespans: tuple[Callable[[], AbstractAsyncContextManager[None]], ...] = ()
    try:
        endpoint = mcp_endpoint(lambda: api.state.backends, keys, settings)
    except MissingExtraError as missing:
        mcp = _absent(str(missing))
    else:
        mcp, lifespans = endpoint.app, (endpoint.lifespan,)
    api = build_api(settings, Telemetry(), lifespans)
    console = build_console(lambda: api.state.backends, keys, settings)
    rest = with_console(console, guarded(api, keys, settings), settings)

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/mcp" or path.startswith("/mcp/")):
            await mcp(scope, receive, send)
        else:
            await rest(scope, receive, send)

    app: ASGIApp = AccessLog(dispatch)
    if settings.store.tracing.enabled:
        # Imported only then: it imports OpenTelemetry.
        from contextstore.interfaces.web.tracing import HttpTracing

        app = HttpTracing(app)
    return app


def _absent(message: str) -> ASGIApp:
    """``/mcp`` without the SDK: 404, naming the extra that brings it."""
    body = error_bytes("not_found", message)

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return answer
