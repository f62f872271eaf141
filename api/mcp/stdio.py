"""`majordomus mcp`: the MCP server over stdio, on a Redis client of its own.

One client on stdin and stdout holds one session (its episode is held while the process
serves); a feed reader of its own pushes the status of the tasks it follows. This module
only runs the server; what it serves is `api.mcp.server`'s.
"""

from __future__ import annotations

import anyio

from majordomus.api.live import FeedHub
from majordomus.api.mcp.server import McpSurface
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.loading import load_capabilities
from majordomus.logs import configure_from
from majordomus.store.connect import connect


def run_stdio(settings: Settings) -> None:
    """`majordomus mcp`: serve the capabilities over stdio until the client closes it."""
    # On stderr, as every process logs; stdout is the client's. WARNING unless the settings
    # name a level: the client shows this stream to its user.
    configure_from(settings, default_level="WARNING")
    anyio.run(serve_stdio, settings)


async def serve_stdio(settings: Settings) -> None:
    from mcp.server.stdio import stdio_server

    registry = load_capabilities(settings.capabilities)
    engine = Engine(connect(settings.redis_url), registry, settings)
    hub = FeedHub(engine, settings)
    surface = McpSurface(engine, settings, stdio=True, hub=hub)
    try:
        await hub.start()
        async with surface.held.maintained(), stdio_server() as (read, write):
            await surface.server.run(read, write, surface.server.create_initialization_options())
    finally:
        await hub.stop()
        await engine.aclose()
