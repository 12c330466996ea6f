"""The ASGI layers every request passes before the routes, outermost first.

``AccessLog`` (one JSON line per request: method, path, status, duration, key id, namespace
— never the key, never a header or a body) → ``Authenticate`` (401 unless the bearer key is
valid; the probes, the OpenAPI document and its browsable reference are open, see
``OPEN_PATHS``) → ``Deadline`` (503 ``timeout`` when the response has not started within the
limit) → ``BodyLimit`` (413 once more than the limit arrives, whatever
Content-Length claimed). Each answers its refusals with the error JSON itself, before any
route runs, so a refused request writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contextstore.interfaces.apikeys import KeyRing, Principal
from contextstore.interfaces.web.errors import BodyTooLarge, error_bytes

access_logger = logging.getLogger("contextstore.interfaces.service.access")

# Answered without a key: the probes (a load balancer sends none; ``/readyz`` tells only its
# status then, its details need a key) and the API's shape (no secret: every operation in it
# still needs its key). A key sent to one of them is still checked.
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs"})
OPEN_PREFIXES: Final = ("/docs/",)


def is_open_path(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


async def _answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class AccessLog:
    """Logs one structured line per request to ``contextstore.interfaces.service.access``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            principal: Principal | None = scope.get("state", {}).get("principal")
            record: dict[str, Any] = {
                "method": scope["method"],
                "path": scope["path"],
                "status": status["code"],
                "ms": round((time.perf_counter() - started) * 1000.0, 3),
                "key_id": principal.key_id if principal else None,
                "namespace": principal.namespace if principal else None,
                "client": scope["client"][0] if scope.get("client") else None,
            }
            access_logger.info("request", extra={"fields": record})


class Authenticate:
    """Puts the key's ``Principal`` in ``scope["state"]``, or answers 401.

    Every check asks the key store (``KeyRing``), so a revoked key is refused from the next
    request on. A key store that cannot be read refuses every key (503).
    An open path (``is_open_path``) is served without a key; with one, the key must be valid
    all the same.
    """

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = _bearer(scope)
        if key is None and is_open_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        if key is None:
            await self._refuse(send, "an API key is required: Authorization: Bearer <key>")
            return
        try:
            principal = await self.keys.averify(key)
        except Exception:
            logging.getLogger("contextstore.interfaces.service").exception(
                "cannot read the key store"
            )
            body = error_bytes("backend_unavailable", "the key store cannot be read")
            await _answer(send, 503, body)
            return
        if principal is None:
            await self._refuse(send, "the API key is not valid")
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Send, message: str) -> None:
        body = error_bytes("unauthorized", message)
        await _answer(send, 401, body, [(b"www-authenticate", b"Bearer")])


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class BodyLimit:
    """413 for a body over ``limit`` bytes: by Content-Length at once, else while it streams."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send)
            return
        seen = {"bytes": 0, "started": False}

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["bytes"] += len(message.get("body", b""))
                if seen["bytes"] > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["started"] = True
            await send(message)

        try:
            await self.app(scope, counted, watch)
        except BodyTooLarge:
            if not seen["started"]:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        message = str(BodyTooLarge(self.limit))
        await _answer(send, 413, error_bytes("body_too_large", message, "body"))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class Deadline:
    """503 (``timeout``) when a request has not started its response within ``seconds``.

    The request's work is cancelled where it next waits (a statement, a Redis call); each
    write is one transaction, so it lands whole or not at all.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = {"value": False}

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                started["value"] = True
            await send(message)

        try:
            # A deadline on this task itself: no second task per request, as wait_for makes.
            async with asyncio.timeout(self.seconds):
                await self.app(scope, receive, watch)
        except TimeoutError:
            if not started["value"]:
                message = f"the request took longer than {self.seconds:g} s"
                await _answer(send, 503, error_bytes("timeout", message))
