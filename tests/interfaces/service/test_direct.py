"""``DirectDispatch`` answers exactly as FastAPI does, for successes and for every error path.

Each request goes once to the bare FastAPI application and once through the dispatch in
front of it; status, headers and body must be the same. The application has the service's
own error handlers; its endpoints succeed, refuse their input, raise a library error, fail
unexpectedly, or take a path parameter (served by FastAPI itself).
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response
from starlette.types import ASGIApp

from contextstore.errors import BackendUnavailableError, NotFoundError, ValidationError
from contextstore.interfaces.service import errors
from contextstore.interfaces.service.body import parse_body
from contextstore.interfaces.service.direct import (
    DirectDispatch,
    DirectRoute,
    takes_only_the_request,
)
from contextstore.interfaces.service.models import json_response


class Echo(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str


router = APIRouter(prefix="/t", route_class=DirectRoute)


@router.post("/echo")
async def echo(request: Request) -> Response:
    body = await parse_body(request, Echo)
    if body.text == "library":
        raise ValidationError("text", "is not allowed here")
    if body.text == "missing":
        raise NotFoundError("entity_id: no lesson 'x'")
    if body.text == "down":
        raise BackendUnavailableError("postgresql://user:secret@db/x is down")
    if body.text == "bug":
        raise RuntimeError("an unexpected failure")
    return json_response(Echo, body)


@router.get("/app")
async def app_title(request: Request) -> Response:
    return Response(request.app.title)


@router.get("/items/{name}")
async def item(name: str, request: Request) -> Response:
    return Response(f"{name} from {request.app.title}")


def send(
    app: ASGIApp, method: str, path: str, content: bytes = b"", *, raise_failures: bool = False
) -> httpx.Response:
    async def request() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_failures)
        async with httpx.AsyncClient(transport=transport, base_url="http://direct.test") as client:
            return await client.request(method, path, content=content)

    return asyncio.run(request())


def build() -> FastAPI:
    api = FastAPI(title="direct-test")
    errors.install(api)
    api.include_router(router)
    return api


REQUESTS: list[tuple[str, str, bytes]] = [
    ("POST", "/t/echo", b'{"text": "hello"}'),
    ("POST", "/t/echo", b'{"text": '),
    ("POST", "/t/echo", b'{"text": "caf\xe9"}'),
    ("POST", "/t/echo", b'{"text": 5}'),
    ("POST", "/t/echo", b'{"text": "x", "more": 1}'),
    ("POST", "/t/echo", b'{"text": "library"}'),
    ("POST", "/t/echo", b'{"text": "missing"}'),
    ("POST", "/t/echo", b'{"text": "down"}'),
    ("POST", "/t/echo", b'{"text": "bug"}'),
    ("GET", "/t/echo", b""),
    ("POST", "/t/echo/", b'{"text": "hello"}'),
    ("GET", "/t/app", b""),
    ("GET", "/t/items/seven", b""),
    ("GET", "/t/nothing", b""),
]


@pytest.mark.parametrize(("method", "path", "content"), REQUESTS)
def test_the_dispatch_answers_as_fastapi_does(
    method: str, path: str, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "contextstore.interfaces.service")
    api = build()
    answers = []
    for app in (api, DirectDispatch(api, [router])):
        response = send(app, method, path, content)
        answers.append((response.status_code, dict(response.headers), response.content))
    assert answers[0] == answers[1]


def test_which_requests_the_dispatch_serves_itself() -> None:
    dispatch = DirectDispatch(build(), [router])
    assert set(dispatch.routes) == {("POST", "/t/echo"), ("GET", "/t/app")}
    assert takes_only_the_request(echo)
    assert not takes_only_the_request(item)


def test_an_unexpected_failure_is_answered_then_raised_for_the_server_to_log() -> None:
    dispatch = DirectDispatch(build(), [router])
    with pytest.raises(RuntimeError, match="unexpected"):
        send(dispatch, "POST", "/t/echo", b'{"text": "bug"}', raise_failures=True)
    response = send(dispatch, "POST", "/t/echo", b'{"text": "bug"}')
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "type": "internal",
            "message": "the request failed; the server log has the cause",
            "field": None,
        }
    }
