"""The two private attributes of the `mcp` SDK that majordomus reads (`api.mcp.sdk`) are
still there and still mean what they meant: an SDK release that moves either fails here,
by name, rather than an episode quietly never detaching. Lifting the `mcp<2.4` pin is safe
when this module passes on the new release (or `api.mcp.sdk` uses its public API instead)."""

from __future__ import annotations

from typing import Any

import httpx
from mcp import Client, types
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from majordomus.api.mcp.mount import transport_security
from majordomus.api.mcp.sdk import connection_of, session_connected


def probe_server(seen: list[Connection]) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        seen.append(connection_of(ctx))
        return types.ListToolsResult(tools=[])

    return Server("probe", on_list_tools=list_tools)


async def test_a_request_context_still_reaches_its_connection() -> None:
    seen: list[Connection] = []
    async with Client(probe_server(seen), mode="legacy") as client:
        await client.list_tools()
        await client.list_tools()
    first, second = seen
    assert isinstance(first, Connection) and first is second  # one connection, its own state
    first.state["majordomus.probe"] = True
    assert isinstance(first.state, dict) and first.exit_stack is not None


async def test_the_session_manager_still_keeps_its_transports_by_session_id() -> None:
    seen: list[Connection] = []
    manager = StreamableHTTPSessionManager(
        app=probe_server(seen), security_settings=transport_security()
    )
    assert isinstance(manager._server_instances, dict)  # noqa: SLF001  the attribute read
    app = StreamableHTTPASGIApp(manager)
    headers = {"Accept": "application/json, text/event-stream"}
    async with manager.run():
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            opened = await http.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "probe", "version": "1"},
                    },
                },
                headers=headers,
            )
            session_id = opened.headers["mcp-session-id"]
            kept = manager._server_instances.get(session_id)  # noqa: SLF001
            assert kept is not None
            assert isinstance(kept.is_terminated, bool) and hasattr(kept, "idle_scope")
            # No request in flight and no GET stream: the idle countdown runs.
            assert session_connected(manager, session_id) is False
            assert session_connected(manager, "no-such-session") is False
            await http.delete("/mcp", headers={**headers, "Mcp-Session-Id": session_id})
            assert session_connected(manager, session_id) is False
