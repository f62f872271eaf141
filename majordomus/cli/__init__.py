"""The command-line surface: `majordomus ...`, a typer app projected from the registry.

`app` holds the process commands (`serve`, `worker`, `dev`, `mcp`, in `processes`) and the
generated ones (`commands`); `render` draws answers, `transport` reaches the engine over
Redis or an API over HTTP.
"""

from majordomus.cli.app import app, main

__all__ = ["app", "main"]
