"""What majordomus takes from the `mcp` SDK beyond its public API, all in this one module.

Two private attributes, each read here and nowhere else, each checked by
`tests/mcp/test_tasks_sdk.py` so that an SDK release that moves them fails that test
(rather than an episode quietly never detaching):

- `ServerSession._connection`: the per-connection state (`Connection.state`, its exit
  stack, its standalone stream) behind a request's session. mcp 2.3 hands a low-level
  handler a `ServerRequestContext` whose session holds it, and offers no accessor;
- `StreamableHTTPSessionManager._server_instances`: a 2025 session's transport, read to
  tell whether its client is connected now (its idle countdown is suspended exactly then).

It also applies an `Extension` (`mcp.server.extension`) to the low-level `Server` the way
`MCPServer(extensions=[...])` does, through the low-level server's public API only
(`add_request_handler`, `Server.extensions`, `compose_tool_call_handler`): majordomus serves
on the low-level server, which takes no extensions itself.
"""

from __future__ import annotations

import math
from typing import Any

from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.context import HandlerResult
from mcp.server.extension import Extension, MethodBinding, RequestHandler, compose_tool_call_handler
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import METHOD_NOT_FOUND, CallToolRequestParams


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The SDK's per-connection state behind a request (mcp 2.3 has no public accessor)."""
    return ctx.session._connection  # noqa: SLF001


def session_connected(manager: StreamableHTTPSessionManager, session_id: str | None) -> bool:
    """Whether a 2025 session has a request in flight or its GET stream open right now.

    The SDK suspends a session's idle countdown exactly then (its `idle_scope` deadline is
    infinite); mcp 2.3 keeps the transports in a private map.
    """
    transport = manager._server_instances.get(session_id or "")  # noqa: SLF001
    if transport is None or transport.is_terminated:
        return False
    idle = transport.idle_scope
    return idle is None or idle.deadline == math.inf


def install_extension(server: Server[Any], extension: Extension, call_tool: RequestHandler) -> None:
    """Serve `extension` on a low-level server: its methods, its capability entry (advertised
    in `server/discover` and `initialize`), and its `tools/call` interceptor around
    `call_tool`, as `MCPServer(extensions=[extension])` applies one."""
    for method in extension.methods():
        if server.get_request_handler(method.method) is not None:
            raise ValueError(f"{extension.identifier}: {method.method!r} is served already")
        server.add_request_handler(method.method, method.params_type, version_gated(method))
    server.extensions[extension.identifier] = extension.settings()
    server.add_request_handler(
        "tools/call", CallToolRequestParams, compose_tool_call_handler([extension], call_tool)
    )


def version_gated(method: MethodBinding) -> RequestHandler:
    """A binding's handler, answering `METHOD_NOT_FOUND` outside its protocol versions."""
    versions = method.protocol_versions
    if versions is None:
        return method.handler

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        if ctx.protocol_version not in versions:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method.method)
        return await method.handler(ctx, params)

    return gated
