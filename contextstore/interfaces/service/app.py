"""The HTTP API: ``build_api`` (routes, schemas, error handlers) and ``guarded`` (the layers
an API request passes). ``contextstore.interfaces.server`` serves it beside the console.

FastAPI because its request and response schemas come from type annotations — the library's
own dataclasses — through pydantic, and the OpenAPI document follows from the same types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp

from contextstore.interfaces.apikeys import KeyRing
from contextstore.interfaces.service import auth, body, errors, reference
from contextstore.interfaces.service.direct import DirectDispatch
from contextstore.interfaces.service.routes import agent, knowledge, lessons, ops
from contextstore.interfaces.web.backends import Backends
from contextstore.interfaces.web.middleware import Authenticate, BodyLimit, Deadline
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry
from contextstore.interfaces.web.tracing import without_native_tracing

DESCRIPTION = """\
The shared context layer of a fleet of agents, over HTTP. Every request but the probes
(`/healthz`, `/readyz`: its details need a key) and this reference carries an API key
(`Authorization: Bearer csk_…`); a key reaches one namespace. Roles: `agent` (run, match,
search, its namespace's metrics), `admin` (also its namespace's documents, prune and
`/metrics` series) and `owner` (also writes lessons and reaches every namespace with
`all_namespaces`). Errors are `{"error": {"type", "message", "field"}}`.
"""

ROUTERS = (agent.router, knowledge.router, lessons.router, ops.router)


def build_api(
    settings: ServiceSettings,
    telemetry: Telemetry,
    lifespans: Sequence[Callable[[], AbstractAsyncContextManager[None]]] = (),
) -> FastAPI:
    """The FastAPI application alone (routes, schemas, error handlers), without the layers.

    ``lifespans`` are entered once the stores exist and left before they close: what else
    the server runs over them (the MCP endpoint's task group).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backends = Backends(settings, telemetry)
        app.state.backends = backends
        try:
            async with AsyncExitStack() as stack:
                for entered in lifespans:
                    await stack.enter_async_context(entered())
                yield
        finally:
            await backends.aclose()

    from contextstore import __version__

    api = FastAPI(
        title="contextstore",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        **without_native_tracing(),
    )
    api.state.telemetry = telemetry
    errors.install(api)
    for router in ROUTERS:
        api.include_router(router)
    body.document(api, auth.document_security)
    reference.install(api)
    return api


def guarded(api: FastAPI, keys: KeyRing, settings: ServiceSettings) -> ASGIApp:
    """``api`` behind its layers: key check → deadline → body limit → the API (its direct
    routes of fixed paths served before FastAPI's layers, see ``DirectDispatch``)."""
    limited = BodyLimit(DirectDispatch(api, ROUTERS), settings.max_body_bytes)
    return Authenticate(Deadline(limited, settings.request_timeout), keys)
