"""The MCP server over Streamable HTTP, as the API mounts it at `/mcp`.

`build_mcp` wraps an `McpSurface` in the SDK's session manager. The Host and Origin checks
the MCP specification asks for (a DNS-rebinding defence) are not the SDK's here: the API's
`api.access.AccessGuard` applies them to `/mcp` exactly as to REST and the live channel
(loopback, the server's own address and `MAJORDOMUS_ALLOWED_HOSTS`), so a refused Host gets
the same 421 envelope on all three. This module does not own the HTTP app: the API mounts
`McpMount.asgi` behind that guard and runs `McpMount.lifespan()` in its own lifespan.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from majordomus.api.live import FeedHub
from majordomus.api.mcp.sdk import session_connected
from majordomus.api.mcp.server import McpSurface
from majordomus.config import Settings
from majordomus.engine import Engine


def transport_security() -> TransportSecuritySettings:
    """The SDK's own Host and Origin checks, off: `api.access.AccessGuard` makes them in
    front of `/mcp`, with the API's one list of allowed hosts (the SDK would answer a
    plain-text 421 of its own, from a list of its own)."""
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


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


def build_mcp(engine: Engine, settings: Settings, hub: FeedHub | None = None) -> McpMount:
    """The MCP surface over `engine`, ready to mount at `/mcp` behind `api.access.AccessGuard`
    (which checks Host and Origin for it); `hub`, the API's shared feed reader, pushes task
    status to `subscriptions/listen` streams."""
    surface = McpSurface(engine, settings, hub=hub)
    manager = StreamableHTTPSessionManager(
        app=surface.server,
        json_response=False,
        stateless=False,
        security_settings=transport_security(),
    )
    surface.held.connected = lambda conn: session_connected(manager, conn.session_id)
    return McpMount(surface, manager)
