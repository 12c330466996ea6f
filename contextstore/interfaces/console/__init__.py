"""The web console: lessons and metrics at a glance, served by ``contextstore serve``.

Server-rendered HTML (Jinja2 templates, inline SVG charts drawn in Python, one stylesheet),
no build step and no script: every page works with JavaScript off. Everything lives under
``/console/`` and ``/`` redirects there; all other paths stay the API's. Administrators sign
in with an admin or owner key (see ``sessions`` for the cookie and the CSRF tokens).

``with_console`` is where the server puts it beside the API: requests for the console go to
the console (with the same deadline and body limit as the API), every other request to the
API stack unchanged, and the lifespan (which opens the stores) to the API. The console reads
the same stores (``contextstore.interfaces.web.backends``) and never imports the service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from contextstore.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ContextStoreError,
    ValidationError,
)
from contextstore.interfaces.apikeys import KeyRing
from contextstore.interfaces.console.pages import (
    documents,
    lessons,
    overview,
    proposals,
    signin,
    usage,
)
from contextstore.interfaces.console.sessions import Signer, load_secret
from contextstore.interfaces.console.web import PREFIX, Console, error_page
from contextstore.interfaces.web.backends import Backends
from contextstore.interfaces.web.middleware import BodyLimit, Deadline
from contextstore.interfaces.web.settings import ServiceSettings

STATIC = Path(__file__).with_name("static")


def build_console(
    backends: Callable[[], Backends], keys: KeyRing, settings: ServiceSettings
) -> Starlette:
    """The console's application; its pages read ``backends()``, the stores the server's
    lifespan opened."""
    signer = Signer(lambda: load_secret(keys.store))
    state = Console(signer=signer, keys=keys, backends=backends)
    routes = [
        Route("/", lambda request: RedirectResponse(PREFIX + "/", status_code=303)),
        Route(PREFIX, lambda request: RedirectResponse(PREFIX + "/", status_code=303)),
        Route(PREFIX + "/", overview.overview),
        Route(PREFIX + "/signin", signin.signin_form, methods=["GET"]),
        Route(PREFIX + "/signin", signin.signin, methods=["POST"]),
        Route(PREFIX + "/signout", signin.signout, methods=["POST"]),
        Route(PREFIX + "/lessons", lessons.lessons_list),
        Route(PREFIX + "/explain", lessons.scope),
        Route(PREFIX + "/usage", usage.usage),
        Route(PREFIX + "/proposals", proposals.queue),
        Route(
            PREFIX + "/proposals/{entity_id:path}/activate", proposals.activate, methods=["POST"]
        ),
        Route(PREFIX + "/proposals/{entity_id:path}/reject", proposals.reject, methods=["POST"]),
        Route(PREFIX + "/lessons/{entity_id:path}/edit", lessons.edit, methods=["POST"]),
        Route(
            PREFIX + "/lessons/{entity_id:path}/{action:str}",
            lessons.change_status,
            methods=["POST"],
        ),
        Route(PREFIX + "/lessons/{entity_id:path}", lessons.detail),
        Route(PREFIX + "/documents", documents.documents_list),
        Route(PREFIX + "/documents/view", documents.view),
        Route(PREFIX + "/documents/delete", documents.delete, methods=["POST"]),
        Mount(PREFIX + "/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            ValidationError: _refused,  # type: ignore[dict-item]
            ContextStoreError: _unavailable,  # type: ignore[dict-item]
        },
    )
    app.state.console = state
    return app


async def _refused(request: Request, exc: ValidationError) -> Response:
    """A value the library refused (a NUL in a lesson id, 300 tags): the visitor's to fix,
    named on the page (escaped, as all text is), never an error of the server's."""
    return error_page(request, 422, f"The request was refused: {exc.field}: {exc.message}")


async def _unavailable(request: Request, exc: ContextStoreError) -> Response:
    """A database or key store that fails mid-request: a page saying so, not a traceback."""
    logging.getLogger("contextstore.interfaces.console").exception("console request failed")
    status = 503 if isinstance(exc, BackendUnavailableError | ConfigurationError) else 500
    message = (
        "The database or the key store cannot be reached; try again shortly."
        if status == 503
        else "The request failed; the server's log has the details."
    )
    return error_page(request, status, message)


def is_console_path(path: str) -> bool:
    return path == "/" or path == PREFIX or path.startswith(PREFIX + "/")


def with_console(console: ASGIApp, api: ASGIApp, settings: ServiceSettings) -> ASGIApp:
    """Console paths to ``console`` (behind the deadline and body limit), the rest to ``api``."""
    guarded = Deadline(BodyLimit(console, settings.max_body_bytes), settings.request_timeout)

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_console_path(scope["path"]):
            await guarded(scope, receive, send)
        else:
            await api(scope, receive, send)

    return dispatch
