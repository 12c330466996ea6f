"""``DirectRoute``: FastAPI calls an endpoint that takes only the ``Request`` as it is.

FastAPI's own handler, on every request, reads the body when the endpoint declares one,
solves the endpoint's dependencies and validates its parameters. An endpoint whose only
parameter is the request needs none of that — it parses its body itself (``parse_body``)
and asks for the caller itself (``auth.caller``) — yet the handler's bookkeeping cost
``/v1/run`` more than the body's validation and the response's serialisation together.
Such an endpoint is the route's handler here; every other endpoint keeps FastAPI's.
Routing, the exception handlers and the OpenAPI document are FastAPI's either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, get_type_hints

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class DirectRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        if takes_only_the_request(self.endpoint):
            handler: Handler = self.endpoint
            return handler
        return super().get_route_handler()


def takes_only_the_request(endpoint: Callable[..., Any]) -> bool:
    """Whether ``endpoint`` is a coroutine function of one parameter, typed ``Request``."""
    if not inspect.iscoroutinefunction(endpoint):
        return False
    parameters = list(inspect.signature(endpoint).parameters)
    if len(parameters) != 1:
        return False
    return get_type_hints(endpoint).get(parameters[0]) is Request
