"""The CLI's capability commands, generated from the registry, and `run`, `follow`, `queue`,
`workers`.

Every capability with a CLI path becomes a typer command at that path: its options are the
members of its input type (`--after`, `--limit`, ...; a required `id` is a positional
argument), its help is its description, and `--format text|json` and `--api URL` are on
every one. `executions.start`'s command (`majordomus run CAP`) starts the execution and
follows it live to its end. By default a command works straight against Redis
(`MAJORDOMUS_REDIS_URL`); with `--api URL` (or `MAJORDOMUS_API_URL`) it goes through the
HTTP API. A failure is one line on stderr (code, message, suggestion) and an exit code
from `errors.EXIT_CODE`, never a traceback. Nothing here is written for one capability but
`run`: the rest is a projection of the declarations.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from majordomus.cli.transport import Direct, Transport, store_failure, transport, typed
from majordomus.config import settings
from majordomus.docs import field_docs, type_text
from majordomus.engine import Engine
from majordomus.errors import EXIT_CODE, ExecutionError, MajordomusError, invalid_input, refused
from majordomus.ids import require_execution_id
from majordomus.loading import load_capabilities
from majordomus.loops import within
from majordomus.model import CancelOutput, ExecutionSnapshot
from majordomus.registry import Capability, Registry
from majordomus.schemas import coerce_strings
from majordomus.states import is_final
from majordomus.store.failures import StoreFailure

INTERRUPTED = 130
"""Exit code when following stopped on a second Ctrl-C (the execution left running)."""

EXIT_CODES_HELP = (
    "Exit codes: 0 succeeded; 1 failed (internal, or an error of its own code below); "
    "2 invalid input; 3 cancelled; 4 not found; 5 refused; 6 forbidden; "
    "7 unavailable (Redis or the API unreachable, or its worker lost); "
    f"{INTERRUPTED} stopped following on a second Ctrl-C (the execution goes on)."
)

GROUP_HELP = {
    "executions": "Inspect, follow, wait on and cancel executions.",
    "capabilities": "What this majordomus can do: every declared capability.",
    "episodes": "The episodes of MCP clients: list them, close one.",
}

OWN_COMMANDS = ("follow", "queue", "workers")


class Format(enum.StrEnum):
    text = "text"
    json = "json"


FORMAT_HELP = "text for people; json for scripts (the capability's answer exactly)."
API_HELP = (
    "Go through the majordomus API at URL instead of straight to Redis "
    "(default: MAJORDOMUS_API_URL; token: MAJORDOMUS_API_TOKEN)."
)


def _format_option() -> Any:
    return typer.Option(Format.text, "--format", help=FORMAT_HELP, case_sensitive=False)


def _api_option() -> Any:
    return typer.Option(None, "--api", metavar="URL", help=API_HELP)


# -- running a command body -------------------------------------------------------------------


def stdout() -> Console:
    return Console(soft_wrap=False)


def stderr() -> Console:
    return Console(stderr=True, soft_wrap=False)


def say_error(exc: MajordomusError) -> None:
    """One line on stderr: the code, the message, and what to do about it."""
    line = f"majordomus: {exc.code}: {exc.message}"
    if exc.suggestion:
        line += f" ({exc.suggestion})"
    typer.echo(" ".join(line.split()), err=True)


def print_json(value: Any) -> None:
    typer.echo(msgspec.json.encode(value).decode())


def execute(body: Callable[[], Coroutine[Any, Any, int | None]], fmt: Format = Format.text) -> None:
    """Run an async command body: its failures become one line and an exit code."""
    try:
        code = asyncio.run(body())
    except MajordomusError as exc:
        if fmt is Format.json:
            print_json({"error": exc.body()})
        say_error(exc)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        typer.echo("majordomus: interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    if code:
        raise typer.Exit(code)


async def using(api: str | None, work: Callable[[Transport], Awaitable[int | None]]) -> int | None:
    """Open the transport `--api` asks for, run `work` on it, close it; Redis failures named."""
    t = transport(settings(), registry(), api)
    try:
        return await work(t)
    except StoreFailure as exc:
        raise store_failure(exc, t.where) from None
    finally:
        with contextlib.suppress(Exception):
            await t.aclose()


def registry() -> Registry:
    return load_capabilities(settings().capabilities)


# -- options from an input type ----------------------------------------------------------------


@dataclass(frozen=True)
class InputOption:
    """One member of a capability's input, as a command-line option or argument."""

    member: str
    param: str
    flag: str
    required: bool
    positional: bool
    boolean: bool
    metavar: str
    help: str


RESERVED_FLAGS = ("--format", "--api", "--help")


def input_options(cap: Capability) -> list[InputOption]:
    """The command-line shape of a capability's input, read from its JSON Schema and the
    members' docstrings: a required `id` is positional, a boolean a `--x/--no-x` flag, the
    rest `--member-name VALUE` options whose text the schema's types parse."""
    schema = cap.input_schema
    required = set(schema.get("required", []))
    docs = field_docs(cap.input)
    options: list[InputOption] = []
    for index, (member, node) in enumerate((schema.get("properties") or {}).items()):
        node = node if isinstance(node, dict) else {}
        kind = type_text(node, schema)
        boolean = kind.rstrip("?") == "boolean"
        flag = "--" + member.replace("_", "-")
        if flag in RESERVED_FLAGS:
            flag = f"--input-{member.replace('_', '-')}"
        text = str(node.get("description") or docs.get(member, ""))
        if "|" in kind and not boolean:
            text += f" One of: {kind.rstrip('?').replace('|', ', ')}."
        default = node.get("default")
        if member not in required and default is not None and not boolean:
            text += f" [default: {json.dumps(default)}]"
        if "object" in kind or "list" in kind or kind == "any":
            text += " (JSON)"
        options.append(
            InputOption(
                member=member,
                param=f"in_{index}",
                flag=flag,
                required=member in required,
                positional=member == "id" and member in required,
                boolean=boolean,
                metavar=_metavar(member, kind),
                help=escape(text.strip()),
            )
        )
    return options


def _metavar(member: str, kind: str) -> str:
    kind = kind.rstrip("?")
    if kind == "any" or "object" in kind or "list" in kind:
        return "JSON"
    if "|" in kind:  # an enumeration (its values are in the help) or a union
        return member.upper()
    return kind.upper()


def _typer_parameter(option: InputOption) -> inspect.Parameter:
    if option.positional:
        default: Any = typer.Argument(..., metavar=option.member.upper(), help=option.help)
        annotation: Any = str
    elif option.boolean:
        name = option.flag.removeprefix("--")
        default = typer.Option(None, f"--{name}/--no-{name}", help=option.help)
        annotation = bool | None
    else:
        default = typer.Option(
            ... if option.required else None,
            option.flag,
            metavar=option.metavar,
            help=option.help,
            show_default=False,
        )
        annotation = str if option.required else str | None
    return inspect.Parameter(
        option.param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def typed_input(cap: Capability, given: dict[str, Any]) -> dict[str, Any]:
    """Option values as the input's members: text parsed by the input schema's types.

    A member the schema leaves untyped (`Any`) takes JSON when its text parses as JSON,
    else the text itself. Anything that still does not fit is named by the validation.
    """
    texts = {k: v for k, v in given.items() if isinstance(v, str)}
    typed: dict[str, Any] = {k: v for k, v in given.items() if not isinstance(v, str)}
    typed.update(coerce_strings(cap.input, texts))
    props = cap.input_schema.get("properties") or {}
    for member, text in texts.items():
        if type_text(props.get(member) or {}) == "any":
            with contextlib.suppress(msgspec.DecodeError):
                typed[member] = msgspec.json.decode(text)
    return typed


def command_help(cap: Capability) -> str:
    e = cap.exposure
    where = [f"capability {cap.id} ({cap.kind})"]
    if e.http_method and e.http_path:
        where.append(f"HTTP {e.http_method} {e.http_path}")
    if e.mcp_tool:
        where.append(f"MCP tool {e.mcp_tool}")
    text = f"{cap.title}.\n\n{cap.description}\n\n" + "; ".join(where) + "."
    if cap.executable:
        text += (
            " This command answers here and now; to run it as an execution anyone can "
            f"watch: majordomus run {cap.id}."
        )
    return escape(text)


def capability_command(cap: Capability) -> Callable[..., None]:
    """A typer command for one capability: its input as options, its answer shown."""
    options = input_options(cap)

    def command(**values: Any) -> None:
        fmt: Format = values.pop("output_format")
        api: str | None = values.pop("api")
        given = {o.member: values[o.param] for o in options if values.get(o.param) is not None}
        execute(lambda: call_and_show(cap, given, fmt, api), fmt)

    params = [_typer_parameter(o) for o in options]
    params.append(
        inspect.Parameter(
            "output_format",
            inspect.Parameter.KEYWORD_ONLY,
            default=_format_option(),
            annotation=Format,
        )
    )
    params.append(
        inspect.Parameter(
            "api", inspect.Parameter.KEYWORD_ONLY, default=_api_option(), annotation=str | None
        )
    )
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = cap.id.replace(".", "_")
    command.__doc__ = command_help(cap)
    return command


async def call_and_show(
    cap: Capability, given: dict[str, Any], fmt: Format, api: str | None
) -> None:
    from majordomus.builtins.capabilities import CapabilityView
    from majordomus.cli.render import RENDERERS, capability_view, generic

    raw = typed_input(cap, given)

    async def work(t: Transport) -> None:
        answer = await t.call(cap, raw)
        if fmt is Format.json:
            print_json(answer)
            return
        console = stdout()
        draw = RENDERERS.get(cap.output)
        if draw is None:
            generic(console, answer)
            return
        value: Any = typed(answer, cap.output, t.where)
        if isinstance(value, CapabilityView):
            known = registry().get(value.id)
            capability_view(console, value, field_docs(known.input) if known else None)
            return
        draw(console, value)

    await using(api, work)


# -- run and follow ----------------------------------------------------------------------------


def read_input(text: str | None, path: str | None) -> Any:
    """`--input JSON` or `--input-file F` (`-` for stdin) as a value; malformed JSON refused."""
    if text is not None and path is not None:
        raise invalid_input("give --input or --input-file, not both")
    source = "--input"
    if path is not None:
        source = f"--input-file {path}"
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
        except OSError as exc:
            raise invalid_input(f"cannot read {path} ({exc.strerror})") from None
    if text is None or not text.strip():
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise invalid_input(
            f"{source} is not valid JSON ({exc})",
            """write the input as a JSON object, e.g. --input '{"steps": 5}'""",
        ) from None


def exit_code_of(snap: ExecutionSnapshot) -> int:
    """0 for succeeded; cancelled 3; failed by its error's code (internal 1, unavailable 7...)."""
    if snap.state == "succeeded":
        return 0
    if snap.state == "cancelled":
        return EXIT_CODE["cancelled"]
    return EXIT_CODE.get(snap.error.code, 1) if isinstance(snap.error, ExecutionError) else 1


async def warn_without_workers(t: Transport, errors: Console) -> None:
    """Straight on Redis, say so when no worker is beating: the execution would only wait."""
    if not isinstance(t, Direct):
        return
    from majordomus.reports import worker_presence

    workers = await worker_presence(t.engine)
    if not any(not w.silent and w.accepting for w in workers):
        errors.print(
            "no worker is taking work on this Redis: it stays queued until one starts "
            "(majordomus worker)",
            style="yellow",
            highlight=False,
        )


async def follow_to_end(
    t: Transport, execution_id: str, title: str, fmt: Format, after: int = 0
) -> int:
    """Show an execution's events until it is final; answers the exit code of its outcome.

    The first Ctrl-C asks it to cancel and goes on following; a second stops following and
    leaves it running, saying how to follow it again.
    """
    from majordomus.cli.render import Follower, outcome

    reg = registry()
    console, errors = stdout(), stderr()
    follower = Follower(console, title) if fmt is Format.text else None
    loop = asyncio.get_running_loop()
    leave = asyncio.Event()
    interrupts = 0
    pending: set[asyncio.Task[None]] = set()

    def note(text: str) -> None:
        if follower is not None:
            follower.note(text)
        else:
            errors.print(text, highlight=False, markup=False)

    async def request_cancel() -> None:
        try:
            answer = await t.call(reg.require("executions.cancel"), {"id": execution_id})
            cancel = typed(answer, CancelOutput, t.where)
        except MajordomusError as exc:
            note(f"cancel failed: {exc.code}: {exc.message}")
            return
        except StoreFailure as exc:
            note(f"cancel failed: {store_failure(exc, t.where).message}")
            return
        if cancel.outcome == "already_finished":
            note("it had already finished")
        elif not cancel.cancellable:
            note("it does not check its cancel flag: its worker stops it after the cancel grace")

    def on_interrupt() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            note(f"Ctrl-C: asking {execution_id} to cancel (Ctrl-C again leaves it running)")
            task = loop.create_task(request_cancel())
            pending.add(task)
            task.add_done_callback(pending.discard)
        else:
            leave.set()

    async def pump() -> None:
        async for message in t.follow(execution_id, after):
            if follower is not None:
                follower.show(message)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_interrupt)
    pumping = loop.create_task(pump())
    leaving = loop.create_task(leave.wait())
    left = False
    try:
        with follower if follower is not None else contextlib.nullcontext():
            done, _ = await asyncio.wait({pumping, leaving}, return_when=asyncio.FIRST_COMPLETED)
            if pumping in done:
                pumping.result()
            else:
                left = True
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        for task in (pumping, leaving, *pending):
            task.cancel()
        await asyncio.gather(pumping, leaving, *pending, return_exceptions=True)
    if left:
        typer.echo(
            f"left {execution_id} running; follow it again with: majordomus follow "
            f"{execution_id} (or wait for it: majordomus executions wait {execution_id})",
            err=True,
        )
        return INTERRUPTED
    final = await t.call(reg.require("executions.get"), {"id": execution_id})
    snap = typed(final, ExecutionSnapshot, t.where)
    while not is_final(snap.state):
        final = await t.call(reg.require("executions.wait"), {"id": execution_id})
        snap = typed(final, ExecutionSnapshot, t.where)
    if fmt is Format.json:
        print_json(final)
    else:
        outcome(console, errors, snap)
    return exit_code_of(snap)


def run_command(cap: Capability) -> Callable[..., None]:
    """`majordomus run CAP`: the command of `executions.start`, which follows what it starts."""

    def run(
        capability: str = typer.Argument(
            ..., metavar="CAP", help="The capability to run, e.g. executions.demonstrate."
        ),
        input: str | None = typer.Option(
            None, "--input", "-i", metavar="JSON", help="Its input, a JSON object."
        ),
        input_file: str | None = typer.Option(
            None,
            "--input-file",
            "-f",
            metavar="FILE",
            help="Read the input from FILE (- for stdin).",
        ),
        detach: bool = typer.Option(
            False, "--detach", "-d", help="Start it, print its id and return; do not follow."
        ),
        output_format: Format = _format_option(),
        api: str | None = _api_option(),
    ) -> None:
        execute(
            lambda: start_and_follow(
                cap, capability, (input, input_file), detach, output_format, api
            ),
            output_format,
        )

    run.__doc__ = escape(
        f"{cap.title}, and follow it live to its end: a progress bar, the steps as they "
        "start and finish, the log lines, then its output or its error with a suggestion. "
        "Ctrl-C asks it to cancel and keeps following until it stops; a second Ctrl-C "
        "leaves it running and says how to follow it again. Not on a terminal: plain "
        "lines, no bar. With --format json: the final snapshot (with --detach: the queued "
        f"one).\n\n{cap.description}\n\n{EXIT_CODES_HELP}"
    )
    return run


async def start_and_follow(
    start: Capability,
    capability: str,
    given: tuple[str | None, str | None],
    detach: bool,
    fmt: Format,
    api: str | None,
) -> int | None:
    raw_input = read_input(*given)

    async def work(t: Transport) -> int:
        snap = await t.call(start, {"capability": capability, "input": raw_input})
        execution_id = typed(snap, ExecutionSnapshot, t.where).id
        if detach:
            if fmt is Format.json:
                print_json(snap)
            else:
                typer.echo(execution_id)
                typer.echo(
                    f"started {capability} as {execution_id} (queued); follow it with: "
                    f"majordomus follow {execution_id}",
                    err=True,
                )
            return 0
        if fmt is Format.text:
            await warn_without_workers(t, stderr())
        return await follow_to_end(t, execution_id, capability, fmt)

    return await using(api, work)


def follow(
    execution_id: str = typer.Argument(..., metavar="ID", help="The execution to follow."),
    after: int = typer.Option(0, "--after", metavar="SEQ", help="Only events after this sequence."),
    output_format: Format = _format_option(),
    api: str | None = _api_option(),
) -> None:
    """Follow an execution live to its end, as `majordomus run` does, from any shell.

    Exits as `majordomus run` does (0 succeeded, 1 failed, 3 cancelled, ...); Ctrl-C asks it
    to cancel, a second Ctrl-C stops following.
    """

    async def body() -> int | None:
        async def work(t: Transport) -> int:
            answer = await t.call(registry().require("executions.get"), {"id": execution_id})
            snap = typed(answer, ExecutionSnapshot, t.where)
            return await follow_to_end(t, execution_id, snap.capability, output_format, after)

        require_execution_id(execution_id)
        return await using(api, work)

    execute(body, output_format)


# -- queue and workers -------------------------------------------------------------------------


def _direct_only(api: str | None, what: str) -> None:
    """`queue` and `workers` read Redis; an explicit `--api` is refused rather than ignored.

    (`MAJORDOMUS_API_URL` alone does not refuse them: they go to Redis as they always do.)
    """
    if api:
        raise refused(
            f"{what} reads the cluster's Redis directly; the API has no route for it",
            "run it without --api where MAJORDOMUS_REDIS_URL reaches the cluster's Redis "
            "(e.g. docker compose exec worker majordomus queue)",
        )


async def watch(
    build: Callable[[], Awaitable[Any]],
    view: Callable[[Any], Any],
    fmt: Format,
    every: float,
    repeat: bool,
) -> None:
    """Show a report once, or redraw it every `every` seconds until Ctrl-C."""
    console = stdout()
    if not repeat:
        report = await build()
        if fmt is Format.json:
            print_json(report)
        else:
            console.print(view(report))
        return
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)

    async def pause() -> None:
        await within(every, stop.wait())

    try:
        if fmt is Format.json or not console.is_terminal:
            while not stop.is_set():
                report = await build()
                if fmt is Format.json:
                    print_json(report)
                else:
                    console.print(view(report))
                    console.print()
                await pause()
            return
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while not stop.is_set():
                live.update(view(await build()), refresh=True)
                await pause()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _watch_option() -> Any:
    return typer.Option(False, "--watch", "-w", help="Redraw it live until Ctrl-C.")


def _interval_option() -> Any:
    return typer.Option(1.0, "--interval", metavar="SECONDS", help="Between redraws.")


def show_report(
    command: str,
    build: Callable[[Engine], Awaitable[Any]],
    view: Callable[[Any], Any],
    fmt: Format,
    every: float,
    repeat: bool,
    api: str | None,
) -> None:
    """`majordomus queue` or `workers`: a report built on the engine over Redis, shown."""

    async def body() -> None:
        _direct_only(api, f"majordomus {command}")

        async def work(t: Transport) -> None:
            assert isinstance(t, Direct)
            await watch(lambda: build(t.engine), view, fmt, every, repeat)

        await using(None, work)

    execute(body, fmt)


def queue(
    watch_: bool = _watch_option(),
    interval: float = _interval_option(),
    output_format: Format = _format_option(),
    api: str | None = _api_option(),
) -> None:
    """The queue now: what waits (by capability, the oldest wait), what runs on which worker,
    the workers and their last beat (silent ones marked), and recent failures with codes.

    Read straight from MAJORDOMUS_REDIS_URL. A worker is silent when its last beat is older
    than MAJORDOMUS_LEASE_SECONDS or its lease is gone: its executions are about to be failed
    as unavailable. With --format json --watch: one JSON report per line.
    """
    from majordomus.cli.render import queue_view
    from majordomus.reports import queue_report

    show_report("queue", queue_report, queue_view, output_format, interval, watch_, api)


def workers(
    watch_: bool = _watch_option(),
    interval: float = _interval_option(),
    output_format: Format = _format_option(),
    api: str | None = _api_option(),
) -> None:
    """The workers: host, pid, executions running, seconds since the last beat, silent ones
    marked. Read straight from MAJORDOMUS_REDIS_URL."""
    from majordomus.cli.render import workers_view
    from majordomus.reports import worker_report

    show_report("workers", worker_report, workers_view, output_format, interval, watch_, api)


# -- mounting ------------------------------------------------------------------------------------

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


def register(app: typer.Typer) -> None:
    """Mount every capability's command, and `follow`, `queue`, `workers`, on `app` (once)."""
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
        _refuse_clash(cap, path, taken, groups, leaves)
        parent = app
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in groups:
                group = typer.Typer(
                    help=GROUP_HELP.get(prefix[-1], f"The {' '.join(prefix)} capabilities."),
                    no_args_is_help=True,
                )
                parent.add_typer(group, name=prefix[-1])
                groups[prefix] = group
            parent = groups[prefix]
        if cap.id == "executions.start":
            short = f"{cap.title} and follow it live to its end."
            parent.command(name=path[-1], short_help=escape(short))(run_command(cap))
        else:
            parent.command(name=path[-1], short_help=escape(cap.title))(capability_command(cap))
        leaves.add(tuple(path))
    app.command("follow")(follow)
    app.command("queue")(queue)
    app.command("workers")(workers)
    _MOUNTED.add(id(app))


def _refuse_clash(
    cap: Capability,
    path: tuple[str, ...],
    taken: set[str],
    groups: dict[tuple[str, ...], typer.Typer],
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
            f"majordomus: the command of capability {cap.id!r} clashes: {clash}; "
            "declare it with another cli=(...) path"
        )
