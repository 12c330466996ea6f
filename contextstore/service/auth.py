"""Who is asking, and whether their role may: FastAPI dependencies over ``Authenticate``.

``Authenticate`` (the middleware) has already refused a missing or unknown key with 401 and
put the key's ``Principal`` in the request state; these dependencies read it, declare the
bearer scheme in the OpenAPI document, and refuse a role that may not call a route (403).
They are coroutines: FastAPI runs a plain function dependency in a worker thread, a hop
that would cost every request more than the rest of the service's own work.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from contextstore.apikeys import Principal

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="csk_<id>_<secret>",
    description="An API key from 'contextstore keys add'.",
)


async def principal(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    found = request.scope.get("state", {}).get("principal")
    if not isinstance(found, Principal):  # only when the app runs without its middleware
        raise HTTPException(401, "an API key is required", {"WWW-Authenticate": "Bearer"})
    return found


async def admin(caller: Annotated[Principal, Depends(principal)]) -> Principal:
    if caller.role != "admin":
        raise HTTPException(403, "this needs an admin key")
    return caller


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
