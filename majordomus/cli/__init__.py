"""The command-line surface: `majordomus ...`, a typer app projected from the registry.

`app` holds the process commands (`serve`, `worker`, `dev`, `mcp`, in `processes`) and the
capabilities' ones (`tree`, made by `commands`, with the help texts of `help`); `render`
draws answers, `transport` reaches the engine over Redis or an API over HTTP.
"""

import sys

try:
    from majordomus.cli.app import app, main
except ModuleNotFoundError as missing:  # a producer's install: no typer, no server
    if missing.name not in ("typer", "rich", "click"):
        raise
    sys.exit(
        f"majordomus: the command line needs majordomus[server] ({missing.name} is not "
        "installed): pip install 'majordomus[server]'. An application that only starts and "
        "follows executions uses majordomus.Client instead."
    )

__all__ = ["app", "main"]
