"""The typer app of `majordomus` and its entry point.

The process commands (`worker`, `dev`, `serve`, `mcp`) are mounted from `processes` when
this module is imported; `main` mounts the capabilities' ones (`tree`: one per capability,
plus `run` and `follow`) and runs the app. An import error there fails with its cause
rather than quietly dropping the commands. Neither the API nor the worker side is imported
here: a process command imports its side when it runs.
"""

from __future__ import annotations

import typer

import majordomus.cli.processes as processes

app = typer.Typer(
    help="majordomus: run capabilities as executions anyone can watch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
processes.register(app)


def main() -> None:
    from majordomus.cli.tree import register

    register(app)
    app()


if __name__ == "__main__":
    main()
