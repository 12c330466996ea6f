"""``create_app()``: the ASGI application ``contextstore serve`` runs (FastAPI on uvicorn).

FastAPI because its request and response schemas come from type annotations — the library's
own dataclasses — through pydantic, and the OpenAPI document follows from the same types;
uvicorn (with uvloop and httptools) because it is the reference ASGI server, runs several
worker processes itself and shuts down gracefully on SIGTERM: it stops accepting, lets
requests in flight finish, then runs the lifespan's shutdown, which closes every store.

``create_app`` takes no arguments when a server imports it as a factory; it then reads
``ServiceSettings.from_env()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp

from contextstore.apikeys import KeyRing
from contextstore.console import build_console, with_console
from contextstore.service import auth, body, errors
from contextstore.service.backends import Backends
from contextstore.service.direct import DirectDispatch
from contextstore.service.middleware import AccessLog, Authenticate, BodyLimit, Deadline
from contextstore.service.routes import agent, knowledge, lessons, ops
from contextstore.service.settings import ServiceSettings
from contextstore.service.telemetry import Telemetry

DESCRIPTION = """\
The shared context layer of a fleet of agents, over HTTP. Every request but `/healthz`
carries an API key (`Authorization: Bearer csk_…`); a key reaches one namespace, and only
admin keys administer lessons or read `/metrics`. Errors are
`{"error": {"type", "message", "field"}}`.
"""

ROUTERS = (agent.router, knowledge.router, lessons.router, ops.router)


def build_api(settings: ServiceSettings, telemetry: Telemetry) -> FastAPI:
    """The FastAPI application alone (routes, schemas, error handlers), without the layers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backends = Backends(settings, telemetry)
        app.state.backends = backends
        try:
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
    )
    api.state.telemetry = telemetry
    errors.install(api)
    for router in ROUTERS:
        api.include_router(router)
    body.document(api, auth.document_security)
    return api


def create_app(settings: ServiceSettings | None = None) -> ASGIApp:
    """The whole service: access log → key check → deadline → body limit → the API (its
    direct routes of fixed paths served before FastAPI's layers, see ``DirectDispatch``).

    The web console (``/`` and ``/console/…``) is its own application beside the API, with
    its own sign-in instead of the bearer key.
    """
    settings = settings or ServiceSettings.from_env()
    keys = KeyRing(settings.keys_file)
    api = build_api(settings, Telemetry())
    limited = BodyLimit(DirectDispatch(api, ROUTERS), settings.max_body_bytes)
    service = Authenticate(Deadline(limited, settings.request_timeout), keys)
    return AccessLog(with_console(build_console(api, keys, settings), service, settings))
