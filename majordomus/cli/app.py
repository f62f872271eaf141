"""The typer app of `majordomus` and its entry point.

The process commands (`worker`, `dev`, `serve`, `mcp`) are mounted from `processes` when
this module is imported; `main` mounts the generated ones from `commands` (one per
capability, plus `run`, `follow`, `queue` and `workers`) and runs the app. An import error
there fails with its cause rather than quietly dropping the commands. Neither the API nor
the worker side is imported here, so `majordomus --help` stays fast.
"""

from __future__ import annotations

import typer

from majordomus.cli import processes

app = typer.Typer(
    help="majordomus: run capabilities as executions anyone can watch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
processes.register(app)


def main() -> None:
    from majordomus.cli.commands import register

    register(app)
    app()


if __name__ == "__main__":
    main()
