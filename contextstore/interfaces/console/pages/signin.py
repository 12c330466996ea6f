"""Sign-in with an admin or owner key, and sign-out.

The key is posted once, checked against the key file exactly as an API request's bearer key
is, and never stored: the browser keeps only the signed session value. An agent key is
refused (403) — the console administers a namespace (and, for owners, the database's
lessons), which agents may not. A client address whose keys failed too often lately is
refused (429) before its key is read (``contextstore.interfaces.console.throttle``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from contextstore.interfaces.console.sessions import SIGNIN_SECONDS, new_nonce
from contextstore.interfaces.console.throttle import client_key
from contextstore.interfaces.console.web import (
    SECURITY_HEADERS,
    SIGNIN_COOKIE,
    Visitor,
    clear_session_cookie,
    console,
    form_action,
    read_form,
    render,
    set_session_cookie,
    signed_in,
    url,
)


def _form(request: Request, *, status: int = 200, message: str | None = None) -> Response:
    """The sign-in form with a fresh pre-session nonce and its CSRF token."""
    state = console(request)
    nonce = new_nonce()
    response = render(
        request,
        "signin.html",
        {"csrf": state.signer.csrf_token(nonce), "message": message},
        status=status,
    )
    response.set_cookie(
        SIGNIN_COOKIE,
        state.signer.signin_value(nonce, int(state.clock())),
        max_age=SIGNIN_SECONDS,
        path=url("/signin"),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def signin_form(request: Request) -> Response:
    if await signed_in(request) is not None:
        return _redirect(url("/"))
    return _form(request)


async def signin(request: Request) -> Response:
    state = console(request)
    client = client_key(request.client.host if request.client else None)
    wait = state.throttle.retry_after(client, state.clock())
    if wait is not None:
        refused = _form(
            request,
            status=429,
            message=f"Too many failed sign-ins from this address; try again in {wait} s.",
        )
        refused.headers["retry-after"] = str(wait)
        return refused
    fields = await read_form(request) or {}
    nonce = state.signer.read_signin(request.cookies.get(SIGNIN_COOKIE), state.clock())
    if not state.signer.csrf_valid(nonce, fields.get("csrf")):
        return _form(
            request,
            status=403,
            message="The form's security token is missing or wrong; please sign in again.",
        )
    key = fields.get("key", "").strip()
    principal = await state.keys.averify(key) if key else None
    if principal is None:
        state.throttle.failed(client, state.clock())
        return _form(request, status=401, message="That key is not valid.")
    state.throttle.succeeded(client)
    if not principal.may("admin"):
        return _form(
            request,
            status=403,
            message="Agent keys cannot sign in: the console needs an admin or owner key.",
        )
    response = _redirect(url("/"))
    set_session_cookie(
        request, response, state.signer.session_value(principal.key_id, int(state.clock()))
    )
    response.delete_cookie(SIGNIN_COOKIE, path=url("/signin"), httponly=True, samesite="strict")
    return response


async def _signout(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    response = _redirect(url("/signin"))
    clear_session_cookie(request, response)
    return response


signout = form_action(_signout)


def _redirect(target: str) -> Response:
    response = RedirectResponse(target, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


__all__ = ["signin", "signin_form", "signout"]
