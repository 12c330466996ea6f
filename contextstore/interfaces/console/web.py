"""What every console page shares: templates, the signed-in admin, forms and CSRF, headers.

Pages are plain HTML forms and links; nothing needs JavaScript. Templates are Jinja2 with
autoescaping on for every template, so text from the database (a lesson's form, a worker's
name) is always shown as text, never read as markup.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from contextstore import __version__
from contextstore.core.lesson_changes import describe_changes
from contextstore.interfaces.apikeys import KeyRing, Principal
from contextstore.interfaces.console.sessions import SESSION_SECONDS, Session, Signer
from contextstore.interfaces.console.throttle import SignInThrottle
from contextstore.interfaces.web.backends import Backends

PREFIX: Final = "/console"
SESSION_COOKIE: Final = "contextstore_console"
SIGNIN_COOKIE: Final = "contextstore_console_signin"
MAX_FORM_BYTES: Final = 64 * 1024
"""Largest form body accepted; a lesson's fields are far smaller."""

# No script may run at all, styles come only from our own file, nothing may frame a page,
# and forms may only post back here.
SECURITY_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


@dataclass
class Console:
    """The console's collaborators, shared by every page."""

    signer: Signer
    keys: KeyRing
    backends: Callable[[], Backends]
    clock: Callable[[], float] = time.time
    throttle: SignInThrottle = field(default_factory=SignInThrottle)

    def __post_init__(self) -> None:
        self.templates = Environment(
            loader=PackageLoader("contextstore.interfaces.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        # The history says what each event changed as ``column: old → new``, in the words
        # ``lessons show`` uses.
        self.templates.globals["describe_changes"] = describe_changes


@dataclass(frozen=True)
class Visitor:
    """A signed-in administrator: the session and the key it was signed in with."""

    session: Session
    principal: Principal
    csrf: str


EVERY_NAMESPACE = "all"
"""``?namespaces=all``: a metrics page over every namespace (owner keys only)."""


def every_namespace(request: Request, visitor: Visitor) -> bool | Response:
    """Whether a metrics page covers every namespace (``?namespaces=all``) rather than the
    key's own; the refusal page (422 for another value, 403 for a key that is not an
    owner's) when it may not."""
    asked = request.query_params.get("namespaces", "")
    if asked not in ("", EVERY_NAMESPACE):
        message = f"namespaces: must be empty or {EVERY_NAMESPACE!r}, got {asked[:64]!r}"
        return error_page(request, 422, message, visitor)
    if asked and not visitor.principal.may("owner"):
        return error_page(request, 403, "namespaces: every namespace needs an owner key", visitor)
    return bool(asked)


def console(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def url(path: str = "/") -> str:
    return PREFIX + path


def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    status: int = 200,
    visitor: Visitor | None = None,
) -> HTMLResponse:
    page = console(request).templates.get_template(template)
    html = page.render(
        url=url, visitor=visitor, path=request.url.path, version=__version__, **context
    )
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def error_page(
    request: Request, status: int, message: str, visitor: Visitor | None = None
) -> Response:
    return render(
        request,
        "error.html",
        {"status": status, "message": message},
        status=status,
        visitor=visitor,
    )


async def signed_in(request: Request) -> Visitor | None:
    """The administrator whose valid session cookie this request carries, else ``None``.

    The key must still be in the key store with the admin or owner role: a revoked or
    demoted key ends its sessions on the next request.
    """
    state = console(request)
    session = state.signer.read_session(request.cookies.get(SESSION_COOKIE), state.clock())
    if session is None:
        return None
    principal = await state.keys.alookup(session.key_id)
    if principal is None or not principal.may("admin"):
        return None
    # Read by the access log, so console requests are logged with their key id.
    request.scope.setdefault("state", {})["principal"] = principal
    return Visitor(session, principal, state.signer.csrf_token(session.nonce))


async def read_form(request: Request) -> dict[str, str] | None:
    """The urlencoded form fields (the last value of each), or ``None`` when not a form."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=64)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[-1] for name, values in fields.items()}


Page = Callable[[Request, Visitor], Awaitable[Response]]
FormPage = Callable[[Request, Visitor, dict[str, str]], Awaitable[Response]]


def page(handler: Page) -> Callable[[Request], Awaitable[Response]]:
    """A page for signed-in administrators; anyone else is sent to the sign-in form."""

    async def endpoint(request: Request) -> Response:
        visitor = await signed_in(request)
        if visitor is None:
            return to_signin(request)
        return await handler(request, visitor)

    return endpoint


def form_action(handler: FormPage) -> Callable[[Request], Awaitable[Response]]:
    """A form target: needs a session and the session's CSRF token, else 303 / 403."""

    async def endpoint(request: Request) -> Response:
        visitor = await signed_in(request)
        if visitor is None:
            return to_signin(request)
        # A body that is no form carries no token either: refused like a forged one.
        fields = await read_form(request) or {}
        state = console(request)
        if not state.signer.csrf_valid(visitor.session.nonce, fields.get("csrf")):
            return error_page(
                request,
                403,
                "The form's security token is missing or wrong; reload the page and try again.",
                visitor,
            )
        return await handler(request, visitor, fields)

    return endpoint


def to_signin(request: Request) -> Response:
    response = RedirectResponse(url("/signin"), status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=SESSION_SECONDS,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
