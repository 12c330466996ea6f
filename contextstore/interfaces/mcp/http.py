"""``/mcp`` on ``contextstore serve``: the MCP server over streamable HTTP, behind API keys.

The same key file, namespaces and roles as the HTTP API: a missing or unknown key is refused
with 401 before MCP runs (the body a JSON-RPC error an MCP client shows as it is); a key's
calls reach its namespace only, on the service's own async stores; a tool its role may not
call is a tool error naming the role (``TOOL_ROLES``).

Stateless, JSON answers (decision 0077): every POST carries its key and is served whole, so
a client may land on any worker process of the server, and the request limits (deadline,
body size) apply to each call as to any API request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Send

from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Lesson, Scope
from contextstore.engine.pipeline import ContextResult
from contextstore.interfaces.apikeys import KeyRing, Principal, Role
from contextstore.interfaces.mcp.server import build_server
from contextstore.interfaces.web.backends import Backends
from contextstore.interfaces.web.middleware import Authenticate, BodyLimit, Deadline
from contextstore.interfaces.web.settings import ServiceSettings

__all__ = ["PATH", "KeyAccess", "McpEndpoint", "mcp_endpoint"]

PATH = "/mcp"
# JSON-RPC's range for a server's own errors; the HTTP status (401) says the rest.
UNAUTHORIZED_CODE = -32001


class KeyAccess:
    """One key's access: its namespace's stores in the service, its role."""

    def __init__(self, backends: Backends, principal: Principal) -> None:
        self.backends = backends
        self.principal = principal

    @property
    def role(self) -> Role:
        return self.principal.role

    @property
    def namespace(self) -> str:
        return self.principal.namespace

    async def run(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, object] | None,
        budget: int | None,
    ) -> ContextResult:
        return await self.backends.run(
            self.namespace, query, scope=scope, filters=filters, override_budget=budget
        )

    async def candidates(self, scope: Scope, include_inactive: bool) -> Sequence[Lesson]:
        backends = self.backends
        return await backends.call(
            lambda: backends.lessons.candidates(scope, include_inactive=include_inactive)
        )

    async def search(
        self, query: str, top_k: int, filters: Mapping[str, object] | None
    ) -> Sequence[Chunk]:
        return await self.backends.search(self.namespace, query, top_k, filters)

    async def document(self, source: str) -> Document:
        documents = self.backends.documents(self.namespace)
        return await self.backends.call(lambda: documents.get(source))

    async def add_document(
        self, text: str, source: str, metadata: Mapping[str, Any] | None
    ) -> Document:
        documents = self.backends.documents(self.namespace)
        return await self.backends.call(lambda: documents.add(text, source, metadata))

    async def delete_document(self, source: str) -> None:
        documents = self.backends.documents(self.namespace)
        await self.backends.call(lambda: documents.delete(source))

    async def propose(self, record: LessonRecord) -> LessonRecord:
        # The audit names the key, as for every lesson change made through the API.
        proposer = self.backends.lessons.as_actor(f"api:{self.principal.key_id}")
        namespace = self.principal.namespace
        return await self.backends.call(lambda: proposer.propose(record, namespace=namespace))

    async def lesson(self, entity_id: str) -> LessonRecord:
        backends = self.backends
        return await backends.call(lambda: backends.lessons.get(entity_id))


def principal_of(ctx: Context) -> Principal:
    """The key ``Authenticate`` verified for the HTTP request this call came in."""
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {})
    found = state.get("principal")
    if not isinstance(found, Principal):  # only without ``Authenticate`` in front
        raise ToolError("an API key is required")
    return found


class McpAuthenticate(Authenticate):
    """``Authenticate`` whose 401 body is a JSON-RPC error, so an MCP client reports the
    reason ("the API key is not valid") rather than a bare status."""

    @staticmethod
    async def _refuse(send: Send, message: str) -> None:
        error = {"code": UNAUTHORIZED_CODE, "message": message, "data": {"type": "unauthorized"}}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class McpEndpoint:
    """``app`` answers ``PATH``; ``lifespan`` must be entered around the server's life."""

    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[None]]


def mcp_endpoint(
    backends: Callable[[], Backends], keys: KeyRing, settings: ServiceSettings
) -> McpEndpoint:
    """The MCP endpoint over the service's stores (``backends()``, ready once it started)."""
    server = build_server(lambda ctx: KeyAccess(backends(), principal_of(ctx)))
    starlette = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.max_body_bytes,
        # Every request carries a key a rebinding page cannot know; the server may be
        # reached under any host name (a proxy, a container), as the API is.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    limited = Deadline(BodyLimit(starlette, settings.max_body_bytes), settings.request_timeout)
    return McpEndpoint(McpAuthenticate(limited, keys), server.session_manager.run)
