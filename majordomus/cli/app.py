"""The typer app of `majordomus` and its entry point.

The process commands (`worker`, `dev`, `serve`, `mcp`) are mounted from `processes` when
this module is imported; `main` mounts the capabilities' ones (`tree`: one per capability,
plus `run`, `follow`, `queue` and `workers`, each made from `commands` when first used)
and runs the app. An import error there fails with its cause rather than quietly dropping
the commands. Neither the API nor the worker side is imported here, so `majordomus --help`
stays fast; `main` runs a command with the collector off while it starts (`startup`), back
on once a process command is chosen, which serves for as long as it runs, and with the
Redis client importing PyJWT only on use (`startup.import_on_use`).
"""

from __future__ import annotations

from typing import Any

import typer

from majordomus.cli import processes
from majordomus.cli.startup import PlainGroup, collecting, ending, import_on_use, starting

PROCESS_NAMES = frozenset(command.__name__ for command in processes.PROCESS_COMMANDS)


class App(PlainGroup):
    """The app's group: a process command it chooses runs with the collector on."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if name in PROCESS_NAMES:
            collecting()
        return name, command, rest


app = typer.Typer(
    cls=App,
    help="majordomus: run capabilities as executions anyone can watch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
processes.register(app)


def main() -> None:
    starting()
    import_on_use()
    try:
        from majordomus.cli.tree import register

        register(app)
        app()
    finally:
        ending()


if __name__ == "__main__":
    main()
