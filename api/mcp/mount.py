"""The MCP server over Streamable HTTP, as the API mounts it at `/mcp`.

`build_mcp` wraps an `McpSurface` in the SDK's session manager with the Host and Origin
checks the MCP specification asks for (a DNS-rebinding defence): the loopback names on any
port are allowed, and whatever `hosts` the server is reached at. This module does not own
the HTTP app: the API mounts `McpMount.asgi` and runs `McpMount.lifespan()` in its own
lifespan.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from api.mcp.server import McpSurface
from majordomus.config import Settings
from majordomus.engine import Engine

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def transport_security(hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """The Host and Origin checks: loopback on any port, plus the hosts the server is reached at.

    `hosts` are `host:port` as clients write them in the URL (e.g. `api.internal:8000`); the
    same hosts are allowed as `http://` and `https://` origins. A request without `Origin`
    (every non-browser client) passes the origin check.
    """
    allowed = [*LOOPBACK_HOSTS, *(f"{h}:*" for h in LOOPBACK_HOSTS), *hosts]
    origins = [f"{scheme}://{h}" for scheme in ("http", "https") for h in allowed]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed, allowed_origins=origins
    )


@dataclass
class McpMount:
    """What the API mounts: the Streamable HTTP ASGI app and the lifespan it needs run."""

    surface: McpSurface
    manager: StreamableHTTPSessionManager
    asgi: StreamableHTTPASGIApp = field(init=False)

    def __post_init__(self) -> None:
        self.asgi = StreamableHTTPASGIApp(self.manager)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """The session manager and the episode keeper, for the host app's lifespan.

        Enter it once (the SDK's session manager runs only once). On exit the episodes this
        replica held are detached, then the sessions are closed.
        """
        async with self.manager.run(), self.surface.held.maintained():
            yield


def build_mcp(engine: Engine, settings: Settings, *, hosts: Sequence[str] = ()) -> McpMount:
    """The MCP surface over `engine`, ready to mount at `/mcp`.

    `hosts`: the `host:port` names clients reach this server at besides loopback (the bound
    interface's name or address when it is not 127.0.0.1); any other Host is answered 421.
    """
    surface = McpSurface(engine, settings)
    manager = StreamableHTTPSessionManager(
        app=surface.server,
        json_response=False,
        stateless=False,
        security_settings=transport_security(hosts),
    )
    surface.held.connected = lambda conn: session_connected(manager, conn.session_id)
    return McpMount(surface, manager)


def session_connected(manager: StreamableHTTPSessionManager, session_id: str | None) -> bool:
    """Whether a 2025 session has a request in flight or its GET stream open right now.

    The SDK suspends a session's idle countdown exactly then (its `idle_scope` deadline is
    infinite); mcp 2.3 keeps the transports in a private map, hence this one helper.
    """
    transport = manager._server_instances.get(session_id or "")  # noqa: SLF001
    if transport is None or transport.is_terminated:
        return False
    idle = transport.idle_scope
    return idle is None or idle.deadline == math.inf
