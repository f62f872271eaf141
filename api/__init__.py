"""The Litestar side of majordomus: routes projected from the registry, the live channel, MCP."""
