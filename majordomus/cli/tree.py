"""The command tree of `majordomus`: each capability's command at its CLI path, `run`, `follow`.

Every capability with a CLI path has a command there (`commands` says what it takes and
does); `executions.start`'s (`majordomus run CAP`) is a group with a command per capability
that can run. The tree is mounted from the capabilities' outlines (`outlines`: the path, the
title, how `executions.start` is reached), which is all `majordomus --help` shows of them,
and each command is made from its capability, read from the registry, when it is first used
(`DeferredGroup`, `DeferredCommand`): `majordomus --help` makes none and reads no input
schema, `majordomus run CAP` makes the commands of CAP and reads the schemas of CAP and of
the start alone. A process that declared nothing and names no module of its own mounts the
tree from the built-ins' outlines as written (`outlines.builtin_outlines`), without
importing a declaration: `majordomus --help` then loads neither the registry nor the model,
nor what running a command needs (`commands`, the engine, the Redis client, httpx). A CLI
path that clashes with another, or with one of the CLI's own commands, is refused when the
tree is mounted.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

import typer

from majordomus.cli.outlines import Outline, builtin_outlines, nothing_declared_yet, outlines_of
from majordomus.cli.startup import PlainCommand, PlainGroup

if TYPE_CHECKING:
    from majordomus.registry import Capability, Registry

INTERRUPTED = 130
"""Exit code when following stopped on a second Ctrl-C (the execution left running)."""

EXIT_CODES_HELP = (
    "Exit codes: 0 succeeded; 1 failed (internal, or an error of its own code below); "
    "2 invalid input; 3 cancelled; 4 not found; 5 refused; 6 forbidden; "
    "7 unavailable (Redis or the API unreachable, or its worker lost); 8 timed out; "
    f"{INTERRUPTED} stopped following on a second Ctrl-C (the execution goes on)."
)

GROUP_HELP = {
    "executions": "Inspect, follow, wait on and cancel executions.",
    "capabilities": "What this majordomus can do: every declared capability.",
    "episodes": "The episodes of MCP clients: list them, close one.",
}

OWN_COMMANDS = ("follow",)


class Format(enum.StrEnum):
    text = "text"
    json = "json"


FORMAT_HELP = "text for people; json for scripts (the capability's answer exactly)."
API_HELP = (
    "Go through the majordomus API at URL instead of straight to Redis "
    "(default: MAJORDOMUS_API_URL; with neither it nor MAJORDOMUS_REDIS_URL, the API of a "
    "running majordomus dev; token: MAJORDOMUS_API_TOKEN)."
)


def format_option() -> Any:
    return typer.Option(Format.text, "--format", help=FORMAT_HELP, case_sensitive=False)


def api_option() -> Any:
    return typer.Option(None, "--api", metavar="URL", help=API_HELP)


def escape(text: str) -> str:
    """`text` with rich markup escaped, as typer's help shows it (rich imported on use)."""
    from rich.markup import escape

    return escape(text)


class Exposed(Protocol):
    @property
    def mcp_tool(self) -> str | None: ...
    @property
    def http_method(self) -> str | None: ...
    @property
    def http_path(self) -> str | None: ...
    @property
    def cli_path(self) -> tuple[str, ...] | None: ...


class Declared(Protocol):
    """What the help texts read of a capability: a `Capability`, or its `Outline`."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def executable(self) -> bool: ...
    @property
    def exposure(self) -> Exposed: ...


# -- help texts ----------------------------------------------------------------------------------

FOLLOWING_HELP = (
    "Ctrl-C asks it to cancel and keeps following until it stops; a second Ctrl-C leaves it "
    "running and says how to follow it again (majordomus follow ID). Not on a terminal: plain "
    "lines, no bar. --detach starts it, prints its id and returns; --format json prints the "
    "final snapshot (with --detach: the queued one)."
)


def command_help(cap: Declared) -> str:
    e = cap.exposure
    where = [f"capability {cap.id} ({cap.kind})"]
    if e.http_method and e.http_path:
        where.append(f"HTTP {e.http_method} {e.http_path}")
    if e.mcp_tool:
        where.append(f"MCP tool {e.mcp_tool}")
    text = f"{cap.title}.\n\n{cap.description}\n\n" + "; ".join(where) + "."
    if cap.executable:
        text += (
            " It runs as an execution on the workers, followed live to its end as "
            f"majordomus run {cap.id} does; --format json prints its output. {FOLLOWING_HELP}"
        )
    return escape(text)


def run_help(start: Declared) -> str:
    """`majordomus run --help`: what run does, from start to end, in one description."""
    e = start.exposure
    where = [f"HTTP {e.http_method} {e.http_path}"] if e.http_method and e.http_path else []
    if e.mcp_tool:
        where.append(f"MCP tool {e.mcp_tool}")
    reached = f" ({', '.join(where)})" if where else ""
    return escape(
        "Start a capability as an execution and follow it live to its end: a progress bar, "
        "the steps as they start and finish, the log lines, then its output, or its error "
        "with a suggestion.\n\n"
        "Each capability that can run is a command below, its input as options "
        "(majordomus run executions.demonstrate --steps 10 --delay-ms 500), or whole as "
        "--input JSON or --input-file FILE; options given beside --input replace its members. "
        f"{FOLLOWING_HELP}\n\n"
        f"The start itself is the capability {start.id}{reached}, which answers at once "
        "with the queued execution; run goes on to follow it.\n\n"
        f"{EXIT_CODES_HELP}"
    )


def run_capability_help(cap: Declared | None) -> str:
    """`majordomus run CAP --help`: the capability, then how run starts and follows it."""
    if cap is None:
        head = "Start the capability named CAP with --input JSON and follow it to its end."
    else:
        head = (
            f"Run {cap.id} as an execution and follow it live to its end.\n\n"
            f"{cap.title}: {cap.description}\n\n"
            "Its input as the options below, or whole as --input JSON or --input-file FILE; "
            "options given beside --input replace its members."
        )
    return escape(f"{head}\n\n{FOLLOWING_HELP}\n\n{EXIT_CODES_HELP}")


def group_help(prefix: tuple[str, ...]) -> str:
    return GROUP_HELP.get(prefix[-1], f"The {' '.join(prefix)} capabilities.")


# -- the capabilities ------------------------------------------------------------------------------


def registry() -> Registry:
    """The process's registry: the built-ins and the modules of `MAJORDOMUS_CAPABILITIES`."""
    from majordomus.config import settings
    from majordomus.loading import load_capabilities

    return load_capabilities(settings().capabilities)


def outlines() -> list[Outline]:
    """The outlines the tree is mounted from: the built-ins' as written, in a process that
    declared nothing and names no module of its own (while they are current); else the
    registry's. The settings are read either way (a bad one stops every command alike)."""
    from majordomus.config import settings

    if nothing_declared_yet() and not settings().capabilities:
        written = builtin_outlines()
        if written is not None:
            return written
    return outlines_of(registry())


# -- follow -----------------------------------------------------------------------------------------


def follow(
    execution_id: str = typer.Argument(..., metavar="ID", help="The execution to follow."),
    after: int = typer.Option(0, "--after", metavar="SEQ", help="Only events after this sequence."),
    output_format: Format = format_option(),
    api: str | None = api_option(),
) -> None:
    """Follow an execution live to its end, as `majordomus run` does, from any shell.

    Exits as `majordomus run` does (0 succeeded, 1 failed, 3 cancelled, ...); Ctrl-C asks it
    to cancel, a second Ctrl-C stops following.
    """
    from majordomus.cli.commands import follow_execution

    follow_execution(execution_id, after, output_format, api)


# -- mounting ------------------------------------------------------------------------------------

ANY_CAPABILITY = "CAP"
"""The hidden command under `run` that any name no other command has reaches: that name is
the capability to start, with `--input` alone (one only the API knows, or none at all)."""

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


class DeferredGroup(PlainGroup):
    """A group of capability commands, each made the first time it is asked for: by its name
    to run it or show its help, or all of them, in their order, to list them (the group's
    help, a completion, a suggestion for a misspelt name). `majordomus --help`, which shows
    the group by its name and help alone, makes none of them and reads no input schema;
    `majordomus executions list` makes `list` alone. `makers_of` answers the makers of the
    commands by name, in their order; it is read when the group is first used."""

    makers_of: Callable[[], Mapping[str, Callable[[], Any]]] = staticmethod(dict)
    _makers: Mapping[str, Callable[[], Any]] | None = None
    _commands: MutableMapping[str, Any]
    _listed = False

    @property
    def makers(self) -> Mapping[str, Callable[[], Any]]:
        if self._makers is None:
            self._makers = self.makers_of()
        return self._makers

    @property  # type: ignore[override]
    def commands(self) -> MutableMapping[str, Any]:
        if not self._listed:
            self._listed = True
            made = self._commands
            every = {n: made[n] if n in made else make() for n, make in self.makers.items()}
            self._commands = {**{n: c for n, c in made.items() if n not in every}, **every}
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, Any]) -> None:
        self._commands = value

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        known = self._commands.get(cmd_name)
        make = self.makers.get(cmd_name)
        if known is None and make is not None:
            known = self._commands[cmd_name] = make()
        return known


def deferred_group(
    makers_of: Callable[[], Mapping[str, Callable[[], Any]]],
    base: type[DeferredGroup] = DeferredGroup,
) -> type[DeferredGroup]:
    """A group class whose commands the makers `makers_of` answers make, one by one; `base`
    adds its own ways (`RunGroup`'s name of any capability)."""
    return type("CapabilityGroup", (base,), {"makers_of": staticmethod(makers_of)})


class RunGroup(DeferredGroup):
    """`majordomus run`: the command of a capability that can run, by its id; any other name
    reaches `ANY_CAPABILITY`, so it is started (or refused, `not_found`) by the engine or the
    API, the same line either way, rather than refused here as an unknown command. Its
    commands are made as `DeferredGroup` makes them: `majordomus run CAP` reads the input
    schema of CAP alone."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        known = super().get_command(ctx, cmd_name)
        if known is not None or cmd_name.startswith("-"):
            return known
        return super().get_command(ctx, ANY_CAPABILITY)


class DeferredCommand(PlainCommand):
    """A capability's command on the app itself (`majordomus queue`), made with a stand-in
    for its parameters and callback (the help and everything else are the real command's
    own): `make` makes them, reading its input schema, when they are first used.
    `majordomus --help` lists it by name and short help, which reads neither."""

    make: Callable[[], Any] = staticmethod(lambda: None)
    _made: Any = None

    def _real(self) -> Any:
        if self._made is None:
            self._made = self.make()
        return self._made

    @property  # type: ignore[override]
    def params(self) -> list[Any]:
        return self._real().params  # itself: click appends --help to it, then takes it off

    @params.setter
    def params(self, value: list[Any]) -> None:
        """The stand-in's (none): the real ones are made."""

    @property  # type: ignore[override]
    def callback(self) -> Any:
        return self._real().callback

    @callback.setter
    def callback(self, value: Any) -> None:
        """The stand-in's: the real one is made."""


def made_command(name: str, function: Callable[..., None], **options: Any) -> Any:
    """`function` as the command `name` (with typer's `options`), made now as typer makes
    the app's commands."""
    inner = typer.Typer()
    inner.command(name=name, cls=PlainCommand, **options)(function)
    return typer.main.get_group(inner).commands[name]


def register(app: typer.Typer) -> None:
    """Mount every capability's command, and `follow`, on `app` (once). Every clash is
    refused here; the commands under a group are made when they are first used."""
    if id(app) in _MOUNTED:
        return
    taken = _existing_names(app) | set(OWN_COMMANDS)
    prefixes: set[tuple[str, ...]] = set()
    leaves: set[tuple[str, ...]] = set()
    under: dict[str, list[str]] = {}
    for cap in outlines():
        path = cap.exposure.cli_path
        if not path:
            continue
        _refuse_clash(cap.id, path, taken, prefixes, leaves)
        prefixes.update(path[:depth] for depth in range(1, len(path)))
        leaves.add(tuple(path))
        if len(path) == 1:
            mount_later(app, cap, path[0])
        elif path[0] in under:
            under[path[0]].append(cap.id)
        else:
            ids = under[path[0]] = [cap.id]
            group = typer.Typer(
                cls=deferred_group(functools.partial(group_makers, ids)),
                help=group_help(path[:1]),
                no_args_is_help=True,
            )
            app.add_typer(group, name=path[0])
    app.command("follow", cls=PlainCommand)(follow)
    _MOUNTED.add(id(app))


def group_makers(ids: list[str]) -> dict[str, Callable[[], Any]]:
    """The makers of a top-level group's commands (those of the capabilities `ids`, whose
    paths all start with its name), by name, in typer's order: its commands, then its
    groups (typer lists those after), each where the first capability under it is."""
    reg = registry()
    commands: dict[str, list[Capability]] = {}
    groups: dict[str, list[Capability]] = {}
    for cap in (reg.require(cap_id) for cap_id in ids):
        path = cap.exposure.cli_path or ()
        command = len(path) == 2 and cap.id != "executions.start"
        (commands if command else groups).setdefault(path[1], []).append(cap)
    return {
        name: functools.partial(_subtree, name, under)
        for name, under in (*commands.items(), *groups.items())
    }


def _subtree(name: str, caps: list[Capability]) -> Any:
    """The command (or the group, with what is below it) `name` of a top-level group, made
    now from the capabilities under it."""
    return group_commands(caps)[name]


def mount_later(parent: typer.Typer, cap: Declared, name: str) -> None:
    """The command of one capability, as `name` on `parent`, made from the registry when it
    is first used (`DeferredCommand`; `run`'s, `RunGroup`)."""
    if cap.id == "executions.start":
        short = f"{cap.title} and follow it live to its end."
        parent.add_typer(run_group(cap), name=name, short_help=escape(short))
        return

    def stand_in() -> None: ...

    stand_in.__doc__ = command_help(cap)
    make = functools.partial(_capability_command_of, cap.id, name)
    cls = type("CapabilityCommand", (DeferredCommand,), {"make": staticmethod(make)})
    parent.command(name=name, short_help=escape(cap.title), cls=cls)(stand_in)


def mount(parent: typer.Typer, cap: Capability, name: str) -> None:
    """The command of one capability, as `name` on `parent`, made now."""
    from majordomus.cli.commands import capability_command

    if cap.id == "executions.start":
        short = f"{cap.title} and follow it live to its end."
        parent.add_typer(run_group(cap), name=name, short_help=escape(short))
    else:
        parent.command(name=name, short_help=escape(cap.title), cls=PlainCommand)(
            capability_command(cap)
        )


def _capability_command_of(cap_id: str, name: str) -> Any:
    """The command of the capability `cap_id`, as `name`, made now."""
    from majordomus.cli.commands import capability_command

    cap = registry().require(cap_id)
    return made_command(name, capability_command(cap), short_help=escape(cap.title))


def group_commands(caps: list[Capability]) -> dict[str, Any]:
    """The commands of a top-level group (`caps`, whose paths all start with its name),
    with the groups below it, made now."""
    inner = typer.Typer()
    groups: dict[tuple[str, ...], typer.Typer] = {}
    for cap in caps:
        path = cap.exposure.cli_path or ()
        parent = inner
        for depth in range(2, len(path)):
            prefix = path[:depth]
            if prefix not in groups:
                groups[prefix] = typer.Typer(
                    cls=PlainGroup, help=group_help(prefix), no_args_is_help=True
                )
                parent.add_typer(groups[prefix], name=prefix[-1])
            parent = groups[prefix]
        mount(parent, cap, path[-1])
    return dict(typer.main.get_group(inner).commands)


def run_group(start: Declared) -> typer.Typer:
    """`majordomus run CAP`, the command of `executions.start`: one command per capability
    that can run (`executable`), its input as options, each made when it is first used."""
    return typer.Typer(
        cls=deferred_group(functools.partial(_run_makers, start.id), RunGroup),
        help=run_help(start),
        no_args_is_help=True,
        subcommand_metavar="CAP [ARGS]...",
    )


def _run_makers(start_id: str) -> dict[str, Callable[[], Any]]:
    reg = registry()
    start = reg.require(start_id)
    makers: dict[str, Callable[[], Any]] = {
        cap.id: functools.partial(_run_command_of, start, cap) for cap in reg if cap.executable
    }
    makers[ANY_CAPABILITY] = functools.partial(_run_command_of, start, None)
    return makers


def _run_command_of(start: Capability, cap: Capability | None) -> Any:
    """The command of `majordomus run <cap>` (of any other name, for `cap` None), made now."""
    from majordomus.cli.commands import run_command

    if cap is None:
        return made_command(ANY_CAPABILITY, run_command(start, None), hidden=True)
    return made_command(cap.id, run_command(start, cap), short_help=escape(cap.title))


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
