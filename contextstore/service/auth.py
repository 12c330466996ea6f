"""Who is asking, and whether their role may: the caller's ``Principal`` and its OpenAPI entry.

``Authenticate`` (the middleware) has already refused a missing or unknown key with 401 and
put the key's ``Principal`` in the request state. ``caller`` and ``admin_caller`` read it and
refuse a role that may not call a route (403); ``Caller`` and ``Admin`` are the same checks
as FastAPI dependencies, for endpoints that take other parameters too. The dependencies are
coroutines: FastAPI runs a plain function dependency in a worker thread, a hop that would
cost every request more than the rest of the service's own work.

Since the key is checked before any route runs, no route declares the bearer scheme as a
dependency; ``document_security`` writes it into the OpenAPI document for every operation
but the open ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException

from contextstore.apikeys import Principal
from contextstore.service.middleware import OPEN_PATHS

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="csk_<id>_<secret>",
    description="An API key from 'contextstore keys add'.",
)
METHODS: Final = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def caller(request: Request) -> Principal:
    """The ``Principal`` of the request's key (401 only when the app runs without
    ``Authenticate``, which refuses a request without a valid key before any route)."""
    found = request.scope.get("state", {}).get("principal")
    if not isinstance(found, Principal):
        raise HTTPException(401, "an API key is required", {"WWW-Authenticate": "Bearer"})
    return found


def admin_caller(request: Request) -> Principal:
    """The request's ``Principal`` if its key is an admin key; 403 otherwise."""
    found = caller(request)
    if found.role != "admin":
        raise HTTPException(403, "this needs an admin key")
    return found


async def principal(request: Request) -> Principal:
    return caller(request)


async def admin(request: Request) -> Principal:
    return admin_caller(request)


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]


def document_security(spec: dict[str, Any]) -> None:
    """Declare the bearer scheme in ``spec`` and require it on every operation but the open
    paths' (``/healthz``)."""
    scheme = bearer.model.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec.setdefault("components", {}).setdefault("securitySchemes", {})[bearer.scheme_name] = scheme
    for path, item in spec.get("paths", {}).items():
        if path in OPEN_PATHS:
            continue
        for method, operation in item.items():
            if method in METHODS:
                operation.setdefault("security", [{bearer.scheme_name: []}])
