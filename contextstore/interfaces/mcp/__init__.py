"""An MCP server over a store: ``contextstore mcp`` serves it on stdio, ``contextstore serve``
on ``/mcp`` (streamable HTTP, behind the API's keys).

Tools build a context, match lessons, search and edit the knowledge base and propose a lesson;
resources read a lesson or a document; a prompt puts the lesson block and the context before
a question. Every answer has the shapes of ``contextstore.interfaces.results``.

The ``mcp`` package is an optional extra (``pip install 'contextstore[mcp]'``): it is imported
only here, when a server is built, never by ``import contextstore``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from contextstore.errors import MissingExtraError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from contextstore.interfaces.apikeys import KeyRing
    from contextstore.interfaces.mcp.http import McpEndpoint
    from contextstore.interfaces.web.backends import Backends
    from contextstore.interfaces.web.settings import ServiceSettings
    from contextstore.store.sync import Store

__all__ = ["build_server", "mcp_endpoint"]


def _missing_sdk(exc: ImportError) -> bool:
    return exc.name is not None and exc.name.split(".")[0] in ("mcp", "mcp_types")


def build_server(store: Store) -> MCPServer:
    """The MCP server of ``store`` for stdio: the local user's, every tool theirs."""
    try:
        from contextstore.interfaces.mcp.access import LocalAccess
        from contextstore.interfaces.mcp.server import build_server as build
    except ImportError as exc:
        if _missing_sdk(exc):
            raise MissingExtraError("The MCP server", "mcp", "mcp") from exc
        raise
    access = LocalAccess(store)
    return build(lambda ctx: access)


def mcp_endpoint(
    backends: Callable[[], Backends], keys: KeyRing, settings: ServiceSettings
) -> McpEndpoint:
    """``/mcp`` for ``contextstore serve`` (see ``contextstore.interfaces.mcp.http``)."""
    try:
        from contextstore.interfaces.mcp.http import mcp_endpoint as endpoint
    except ImportError as exc:
        if _missing_sdk(exc):
            raise MissingExtraError("The MCP endpoint", "mcp", "mcp") from exc
        raise
    return endpoint(backends, keys, settings)
