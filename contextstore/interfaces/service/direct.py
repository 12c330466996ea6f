"""Endpoints that take only the ``Request``, called as they are.

FastAPI's own handler, on every request, reads the body when the endpoint declares one,
solves the endpoint's dependencies and validates its parameters; its layers around the
router keep exit stacks for dependencies with ``yield`` and try each route's pattern in
turn. An endpoint whose only parameter is the request needs none of that — it parses its
body itself (``parse_body``) and asks for the caller itself (``auth.caller``) — and on
``/v1/run`` that machinery cost more than the body's validation and the response's
serialisation together, several times more once the engine's run has left the processor's
caches cold.

``DirectRoute`` makes such an endpoint its route's handler; ``DirectDispatch`` serves the
direct routes of fixed paths before FastAPI's layers, by a dictionary lookup. Every other
request (a path with parameters, an unknown path or method, the lifespan) goes through
FastAPI as before, and the OpenAPI document is FastAPI's either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, get_type_hints

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class DirectRoute(APIRoute):
    """An ``APIRoute`` whose handler is the endpoint itself when it takes only the request."""

    def get_route_handler(self) -> Handler:
        if self.direct:
            handler: Handler = self.endpoint
            return handler
        return super().get_route_handler()

    @property
    def direct(self) -> bool:
        return takes_only_the_request(self.endpoint)


def takes_only_the_request(endpoint: Callable[..., Any]) -> bool:
    """Whether ``endpoint`` is a coroutine function of one parameter, typed ``Request``."""
    if not inspect.iscoroutinefunction(endpoint):
        return False
    parameters = list(inspect.signature(endpoint).parameters)
    if len(parameters) != 1:
        return False
    return get_type_hints(endpoint).get(parameters[0]) is Request


class DirectDispatch:
    """``api``, with the direct routes of fixed paths among ``routers`` served first.

    What FastAPI's layers do that such a route still needs is done here the same way:
    ``request.app`` is ``api``; an exception is answered by ``api``'s handler for the
    nearest class in its MRO; and one that only the handler of ``Exception`` answers (a
    failure nobody expected) is raised again once answered, as Starlette does, so the
    server logs it too.
    """

    def __init__(self, api: FastAPI, routers: Iterable[APIRouter]) -> None:
        self.api = api
        self.routes: dict[tuple[str, str], DirectRoute] = {}
        for router in routers:
            for route in router.routes:
                if isinstance(route, DirectRoute) and route.direct and "{" not in route.path:
                    for method in route.methods or ():
                        self.routes[(method, route.path)] = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http":
            route = self.routes.get((scope["method"], scope["path"]))
        if route is None:
            await self.api(scope, receive, send)
            return
        endpoint: Handler = route.endpoint
        # As Starlette's router does: the layers outside (the request's span) read it.
        scope["route"] = route
        scope["app"] = self.api
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handlers = self.api.exception_handlers
            kind = next((kind for kind in type(exc).__mro__ if kind in handlers), None)
            if kind is None:
                raise
            answer = handlers[kind](request, exc)
            response = await answer if inspect.isawaitable(answer) else answer
            await response(scope, receive, send)
            if kind is Exception:
                raise
            return
        await response(scope, receive, send)
