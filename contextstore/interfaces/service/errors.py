"""Every error the service answers, as ``{"error": {"type", "message", "field"}}``.

Statuses: 400 a body that is not JSON (or not UTF-8); 422 a value refused, ``field`` naming
it (``scope.tags``, ``applies_to[1]``); 401 no or unknown key; 403 a role that may not do
this; 404 no such lesson or route; 405 a method the route does not have; 413 a body over the
limit; 429 past a cap (a namespace's lesson proposals per hour; ``Retry-After`` in
seconds); 503 a required backend down, or the request over its time limit (``type`` says
which). Messages never carry a key, a password or a stack trace; a failure we did not expect
is logged with its traceback and answered 500 with a fixed message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException
from starlette.responses import Response

from contextstore.errors import (
    BackendUnavailableError,
    ContextStoreError,
    NotFoundError,
    RateLimitedError,
    ValidationError,
)
from contextstore.interfaces.service.body import BodyNotUtf8
from contextstore.interfaces.web.errors import BodyTooLarge

logger = logging.getLogger("contextstore.interfaces.service")

JSON: Final = "application/json"


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``type``, a readable ``message``, the ``field`` if one."""

    model_config = ConfigDict(extra="forbid")

    type: str
    message: str
    field: str | None = None


class ErrorBody(BaseModel):
    """The body of every error response."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


Responses = dict[int | str, dict[str, object]]


def error_responses(*statuses: int) -> Responses:
    """The OpenAPI ``responses`` of a route that may answer these statuses with an ``ErrorBody``."""
    return {status: {"model": ErrorBody} for status in statuses}


def error_response(
    status: int,
    kind: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = {"error": {"type": kind, "message": message, "field": field}}
    return Response(json.dumps(body, ensure_ascii=False), status, headers=headers, media_type=JSON)


def field_path(location: Sequence[int | str]) -> str | None:
    """``("body", "scope", "tags", 0)`` → ``"scope.tags[0]"``; the body itself → ``None``."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or None


def _validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors: list[dict[str, Any]] = list(exc.errors())
    first = errors[0] if errors else {"type": "invalid", "loc": ("body",), "msg": "invalid"}
    location = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return error_response(400, "malformed_json", "the body is not valid JSON", "body")
    field = field_path(location) or ("body" if location[:1] == ("body",) else None)
    kind = first.get("type", "invalid")
    context = first.get("ctx")
    refused = context.get("error") if isinstance(context, dict) else None
    if isinstance(refused, ValidationError):
        # A library type refused itself (``MatchOptions.order``): name its field in place.
        inner = field_path((*location, refused.field)) if refused.field else field
        return error_response(422, "invalid", refused.message, inner)
    if kind == "missing":
        message = "is required"
    elif kind in ("unexpected_keyword_argument", "extra_forbidden"):
        message = "is not a known field"
    else:
        message = str(first.get("msg", "is invalid"))
    return error_response(422, "invalid", message, field)


def _library_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    return error_response(422, "invalid", exc.message, exc.field)


def _too_large(request: Request, exc: Exception) -> Response:
    return error_response(413, "body_too_large", str(exc), "body")


def _not_utf8(request: Request, exc: Exception) -> Response:
    return error_response(400, "malformed_body", "the body is not UTF-8 text", "body")


def _not_found(request: Request, exc: Exception) -> Response:
    # The repository says "entity_id: no lesson 'x'": the part before the colon is the field.
    field, _, message = str(exc).partition(": ")
    if not message or not field.isidentifier():
        return error_response(404, "not_found", str(exc))
    return error_response(404, "not_found", message, field)


def _rate_limited(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RateLimitedError)
    headers = {"Retry-After": str(exc.retry_after)}
    return error_response(429, "rate_limited", str(exc), headers=headers)


def _unavailable(_: Request, exc: Exception) -> Response:
    logger.warning("backend unavailable: %s", exc)
    return error_response(503, "backend_unavailable", "a required backend is unavailable")


def _library_error(request: Request, exc: Exception) -> Response:
    logger.error("request %s %s failed: %s", request.method, request.url.path, exc)
    return error_response(500, "internal", "the request failed; the server log has the cause")


def _http(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kinds = {
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
    }
    if isinstance(exc.__cause__, BodyTooLarge):
        # The framework wraps any failure while reading the body in a 400; this one is ours.
        return error_response(413, "body_too_large", str(exc.__cause__), "body")
    if exc.status_code == 400:
        return error_response(400, "malformed_body", "the body is not UTF-8 JSON", "body")
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    kind = kinds.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, kind, message, headers=headers)


def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("request %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", "the request failed; the server log has the cause")


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the error JSON."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ValidationError, _library_validation)
    app.add_exception_handler(BodyNotUtf8, _not_utf8)
    app.add_exception_handler(BodyTooLarge, _too_large)
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(RateLimitedError, _rate_limited)
    app.add_exception_handler(BackendUnavailableError, _unavailable)
    app.add_exception_handler(ContextStoreError, _library_error)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
