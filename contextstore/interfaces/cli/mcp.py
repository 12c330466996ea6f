"""``contextstore mcp``: the MCP server on stdin/stdout, for a desktop client to start."""

from __future__ import annotations

from contextstore.interfaces.cli.common import cli_errors
from contextstore.interfaces.cli.options import DatabaseUrl, Namespace, RedisUrl, open_store


def mcp(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    namespace: Namespace = None,
) -> None:
    """Serve the MCP tools and resources on stdio (for a desktop MCP client).

    The server speaks for the local user who starts it: every tool is allowed, writes
    included (adding and deleting documents, proposing lessons).
    """
    with cli_errors():
        from contextstore.interfaces.mcp import build_server

        with open_store(database_url, redis_url, namespace) as store:
            build_server(store).run("stdio")
