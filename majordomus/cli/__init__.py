"""The command-line surface: `majordomus ...`, a typer app projected from the registry.

`app` holds the process commands (`serve`, `worker`, `dev`, `mcp`, in `processes`) and the
capabilities' ones (`tree`, made from `commands` when first used); `render` draws answers,
`transport` reaches the engine over Redis or an API over HTTP.

Importing this package imports typer and what the app is made of: tens of thousands of
objects (modules, classes, functions) that live as long as the process. The cyclic
collector is off while they are made (it would examine them again and again, for nothing:
a few milliseconds of every command's start-up) and as it was once they are; `main` then
runs the command as `startup` says.
"""

import gc
import sys

_collecting = gc.isenabled()
gc.disable()
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
finally:
    if _collecting:
        gc.enable()

__all__ = ["app", "main"]
