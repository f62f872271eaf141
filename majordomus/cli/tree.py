"""The command tree of `majordomus`: each capability's command at its CLI path, `run`, `follow`.

Every capability with a CLI path has a command there, made from its declaration (`commands`
says what it takes and does): the CLI is a projection of the registry, as the API and the
MCP tools are. `executions.start`'s command (`majordomus run CAP`) is a group with a command
per capability that can run; any other name reaches the engine or the API (`RunGroup`). The
whole tree is made when the app starts, `majordomus --help` included: reading every
declaration costs some tens of milliseconds, and there is one way to make a command. A CLI
path that clashes with another, or with one of the CLI's own commands, is refused when the
tree is mounted.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from majordomus.cli.commands import capability_command, follow, registry, run_command
from majordomus.cli.help import escape, group_help, run_help

if TYPE_CHECKING:
    from majordomus.registry import Capability, Registry

ANY_CAPABILITY = "CAP"
"""The hidden command under `run` that any name no other command has reaches: that name is
the capability to start, with `--input` alone (one only the API knows, or none at all)."""

OWN_COMMANDS = ("follow",)
"""The CLI's own commands mounted here (the process commands are `processes`')."""

_MOUNTED: set[int] = set()


def _existing_names(app: typer.Typer) -> set[str]:
    names = set()
    for info in app.registered_commands:
        if info.name:
            names.add(info.name)
        elif info.callback is not None:
            names.add(info.callback.__name__.replace("_", "-"))
    names.update(g.name for g in app.registered_groups if g.name)
    return names


class RunGroup(TyperGroup):
    """`majordomus run`: the command of a capability that can run, by its id; any other name
    reaches `ANY_CAPABILITY`, so it is started (or refused, `not_found`) by the engine or the
    API, the same line either way, rather than refused here as an unknown command."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        known = super().get_command(ctx, cmd_name)
        if known is not None or cmd_name.startswith("-"):
            return known
        return super().get_command(ctx, ANY_CAPABILITY)


def register(app: typer.Typer) -> None:
    """Mount every capability's command, and `follow`, on `app` (once). Every clash is
    refused here."""
    if id(app) in _MOUNTED:
        return
    reg = registry()
    taken = _existing_names(app) | set(OWN_COMMANDS)
    groups: dict[tuple[str, ...], typer.Typer] = {}
    leaves: set[tuple[str, ...]] = set()
    for cap in reg:
        path = cap.exposure.cli_path
        if not path:
            continue
        _refuse_clash(cap.id, path, taken, groups, leaves)
        leaves.add(tuple(path))
        parent = app
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in groups:
                groups[prefix] = typer.Typer(help=group_help(prefix), no_args_is_help=True)
                parent.add_typer(groups[prefix], name=prefix[-1])
            parent = groups[prefix]
        mount(parent, cap, path[-1], reg)
    app.command("follow")(follow)
    _MOUNTED.add(id(app))


def mount(parent: typer.Typer, cap: Capability, name: str, reg: Registry) -> None:
    """The command of one capability, as `name` on `parent`."""
    if cap.id == "executions.start":
        short = f"{cap.title} and follow it live to its end."
        parent.add_typer(run_group(cap, reg), name=name, short_help=escape(short))
        return
    parent.command(name=name, short_help=escape(cap.title))(capability_command(cap))


def run_group(start: Capability, reg: Registry) -> typer.Typer:
    """`majordomus run CAP`, the command of `executions.start`: one command per capability
    that can run (`executable`), its input as options, and `ANY_CAPABILITY`."""
    group = typer.Typer(
        cls=RunGroup,
        help=run_help(start),
        no_args_is_help=True,
        subcommand_metavar="CAP [ARGS]...",
    )
    for cap in reg:
        if cap.executable:
            group.command(name=cap.id, short_help=escape(cap.title))(run_command(start, cap))
    group.command(name=ANY_CAPABILITY, hidden=True)(run_command(start, None))
    return group


def _refuse_clash(
    cap_id: str,
    path: tuple[str, ...],
    taken: set[str],
    groups: Collection[tuple[str, ...]],
    leaves: set[tuple[str, ...]],
) -> None:
    clash = None
    if path[0] in taken:
        clash = f"'majordomus {path[0]}' is one of majordomus's own commands"
    elif tuple(path) in groups:
        clash = f"'majordomus {' '.join(path)}' is already a group of commands"
    elif any(path[:d] in leaves for d in range(1, len(path))):
        clash = "a shorter path of it is already a command"
    if clash:
        raise SystemExit(
            f"majordomus: the command of capability {cap_id!r} clashes: {clash}; "
            "declare it with another cli=(...) path"
        )
