"""Who is asking, and whether their role may: the caller's ``Principal`` and its OpenAPI entry.

``Authenticate`` (the middleware) has already refused a missing or unknown key with 401 and
put the key's ``Principal`` in the request state. ``caller``, ``admin_caller`` and
``owner_caller`` read it and refuse a role that may not call a route (403, ``ROLES`` in
``contextstore.interfaces.apikeys`` ranks them); ``Caller``, ``Admin`` and ``Owner`` are the
same checks as FastAPI dependencies, for endpoints that take other parameters too. The
dependencies are coroutines: FastAPI runs a plain function dependency in a worker thread, a
hop that would cost every request more than the rest of the service's own work.

Since the key is checked before any route runs, no route declares the bearer scheme as a
dependency; ``document_security`` writes it into the OpenAPI document for every operation
but the open ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException

from contextstore.interfaces.apikeys import Principal, Role

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="csk_<id>_<secret>",
    description="An API key from 'contextstore keys add'.",
)
METHODS: Final = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
# Operations answered without a key: ``/healthz`` needs none; ``/readyz`` answers its status
# without one and its details with one (an optional key, ``{}`` in OpenAPI's terms).
KEYLESS: Final = frozenset({"/healthz"})
KEY_OPTIONAL: Final = frozenset({"/readyz"})


def optional_caller(request: Request) -> Principal | None:
    """The ``Principal`` of the request's key on an open path, ``None`` when it sent none."""
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else None


def caller(request: Request) -> Principal:
    """The ``Principal`` of the request's key (401 only when the app runs without
    ``Authenticate``, which refuses a request without a valid key before any route)."""
    found = request.scope.get("state", {}).get("principal")
    if not isinstance(found, Principal):
        raise HTTPException(401, "an API key is required", {"WWW-Authenticate": "Bearer"})
    return found


def admin_caller(request: Request) -> Principal:
    """The request's ``Principal`` if its key is an admin (or owner) key; 403 otherwise."""
    return _needing(request, "admin")


def owner_caller(request: Request) -> Principal:
    """The request's ``Principal`` if its key is an owner key (the database's); 403
    otherwise."""
    return _needing(request, "owner")


def _needing(request: Request, role: Role) -> Principal:
    found = caller(request)
    if not found.may(role):
        raise HTTPException(403, f"this needs an {role} key")
    return found


def every_namespace(found: Principal, all_namespaces: bool | None) -> bool:
    """Whether a request reaches every namespace's metrics: it asked (``all_namespaces``)
    and its key is an owner key; asked with another key, 403."""
    if not all_namespaces:
        return False
    if not found.may("owner"):
        raise HTTPException(403, "all_namespaces needs an owner key")
    return True


async def principal(request: Request) -> Principal:
    return caller(request)


async def admin(request: Request) -> Principal:
    return admin_caller(request)


async def owner(request: Request) -> Principal:
    return owner_caller(request)


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
Owner = Annotated[Principal, Depends(owner)]


def document_security(spec: dict[str, Any]) -> None:
    """Declare the bearer scheme in ``spec`` and require it on every operation but the open
    ones (``KEYLESS``; optional on ``KEY_OPTIONAL``)."""
    scheme = bearer.model.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec.setdefault("components", {}).setdefault("securitySchemes", {})[bearer.scheme_name] = scheme
    for path, item in spec.get("paths", {}).items():
        if path in KEYLESS:
            continue
        required: list[dict[str, list[str]]] = [{bearer.scheme_name: []}]
        security = [{}, *required] if path in KEY_OPTIONAL else required
        for method, operation in item.items():
            if method in METHODS:
                operation.setdefault("security", security)
