"""The CLI's capability commands, generated from the registry, and `run` and `follow`.

Every capability with a CLI path becomes a typer command at that path: its options are the
members of its input type (`--after`, `--limit`, ...; a required `id` is a positional
argument), its help is its description, and `--format text|json` and `--api URL` are on
every one; a read of state (a query that answers directly: `majordomus queue`,
`executions list`...) also takes `--watch`, which reads it again and redraws it.
`executions.start`'s command (`majordomus run CAP`) is a group with a command per
capability that can run, whose options are that capability's input as above; it starts
the execution and follows it live to its end. A command works straight against Redis
(`MAJORDOMUS_REDIS_URL`); with `--api URL` (or `MAJORDOMUS_API_URL`) it goes through the
HTTP API; with neither, through the API of a running `majordomus dev` (found by its record,
which it says in one line on stderr), else against the default Redis, named as the default
(`transport.transport`). A failure is one line on stderr (code, message, suggestion) and an
exit code from `errors.EXIT_CODE`, never a traceback. Nothing here is written for one capability but
`run`: the rest is a projection of the declarations. What only running a command needs
(the engine, the Redis client, httpx, rich's live display and bar) is imported where it
runs, so `majordomus --help` loads none of it; and each command is made, its input schema
read, when it is first used (`DeferredGroup`, `DeferredCommand`): `majordomus --help` reads
no schema, `majordomus run CAP` those of CAP and of the start alone. Every command's
parameters convert their values as typer would, without pydantic (`startup.PlainCommand`).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import io
import json
import signal
import sys
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Mapping,
    MutableMapping,
)
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import typer

from majordomus.cli.startup import PlainCommand, PlainGroup, collecting
from majordomus.cli.transport import Direct, Transport, store_failure, transport, typed
from majordomus.config import settings
from majordomus.docs import field_docs, type_text
from majordomus.errors import EXIT_CODE, ExecutionError, MajordomusError, invalid_input
from majordomus.ids import require_execution_id
from majordomus.loading import load_capabilities
from majordomus.model import CancelOutput, ExecutionSnapshot
from majordomus.registry import Capability, Registry
from majordomus.schemas import coerce_strings
from majordomus.states import is_final

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

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


def _format_option() -> Any:
    return typer.Option(Format.text, "--format", help=FORMAT_HELP, case_sensitive=False)


def _api_option() -> Any:
    return typer.Option(None, "--api", metavar="URL", help=API_HELP)


def _watch_option() -> Any:
    return typer.Option(False, "--watch", "-w", help="Read it again and redraw it until Ctrl-C.")


def _detach_option() -> Any:
    return typer.Option(
        False, "--detach", "-d", help="Start it, print its id and return; do not follow."
    )


def _interval_option() -> Any:
    return typer.Option(1.0, "--interval", metavar="SECONDS", help="Between redraws.")


# -- running a command body -------------------------------------------------------------------


def stdout() -> Console:
    from rich.console import Console

    return Console(soft_wrap=False)


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=False)


def escape(text: str) -> str:
    """`text` with rich markup escaped, as typer's help shows it (rich imported on use)."""
    from rich.markup import escape

    return escape(text)


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
    import asyncio

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
    from majordomus.store.failures import StoreFailure

    t = transport(settings(), registry(), api)
    if t.found:
        typer.echo(t.found, err=True)
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


RESERVED_FLAGS = (
    "--format",
    "--api",
    "--help",
    "--watch",
    "--interval",
    "--input",
    "--input-file",
    "--detach",
)
"""The CLI's own flags: an input member that would take one is `--input-<member>` instead,
on its command and under `run` alike."""


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
            " It runs as an execution on the workers, followed live to its end as "
            f"majordomus run {cap.id} does; --format json prints its output. {FOLLOWING_HELP}"
        )
    return escape(text)


def watchable(cap: Capability) -> bool:
    """A read of state (a query that answers directly) can be watched: read again, redrawn."""
    return cap.kind == "query" and not cap.executable


def _keyword(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _signed(
    command: Callable[..., None], params: list[inspect.Parameter], name: str, doc: str
) -> Callable[..., None]:
    """`command` as typer reads it: these parameters, this name, this help."""
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = name
    command.__doc__ = doc
    return command


def capability_command(cap: Capability) -> Callable[..., None]:
    """A typer command for one capability: its input as options, its answer shown."""
    options = input_options(cap)
    watched = watchable(cap)

    def command(**values: Any) -> None:
        fmt: Format = values.pop("output_format")
        api: str | None = values.pop("api")
        every: float | None = values.pop("interval") if values.pop("watch_", False) else None
        given = {o.member: values[o.param] for o in options if values.get(o.param) is not None}
        if cap.executable:
            request = RunRequest(cap.id, None, None, given, values.pop("detach"))
            start = registry().require("executions.start")
            execute(lambda: start_and_follow(start, cap, request, fmt, api, answer=True), fmt)
            return
        execute(lambda: call_and_show(cap, given, fmt, api, every), fmt)

    params = [_typer_parameter(o) for o in options]
    if cap.executable:
        params.append(_keyword("detach", _detach_option(), bool))
    if watched:
        params.append(_keyword("watch_", _watch_option(), bool))
        params.append(_keyword("interval", _interval_option(), float))
    params.append(_keyword("output_format", _format_option(), Format))
    params.append(_keyword("api", _api_option(), str | None))
    return _signed(command, params, cap.id.replace(".", "_"), command_help(cap))


def show_answer(console: Console, cap: Capability, answer: Any, where: str) -> None:
    """A capability's answer for people: its output type's picture, else its plain values."""
    from majordomus.builtins.capabilities import CapabilityView
    from majordomus.cli.render import RENDERERS, capability_view, generic

    draw = RENDERERS.get(cap.output)
    if draw is None:
        generic(console, answer)
        return
    value: Any = typed(answer, cap.output, where)
    if isinstance(value, CapabilityView):
        known = registry().get(value.id)
        capability_view(console, value, field_docs(known.input) if known else None)
        return
    draw(console, value)


async def call_and_show(
    cap: Capability,
    given: dict[str, Any],
    fmt: Format,
    api: str | None,
    every: float | None = None,
) -> None:
    """Call a capability once and show its answer; with `every`, again and again until Ctrl-C."""
    raw = typed_input(cap, given)

    async def work(t: Transport) -> None:
        async def read() -> Any:
            return await t.call(cap, raw)

        def draw(console: Console, answer: Any) -> None:
            show_answer(console, cap, answer, t.where)

        if every is not None:
            await watch(read, draw, fmt, every)
            return
        answer = await read()
        if fmt is Format.json:
            print_json(answer)
        else:
            draw(stdout(), answer)

    await using(api, work)


def picture(console: Console, draw: Callable[[Console, Any], None], answer: Any) -> Text:
    """What `draw` would print on `console`, as one renderable (for a live redraw)."""
    from rich.console import Console
    from rich.text import Text

    offscreen = Console(
        file=io.StringIO(),
        width=console.width,
        force_terminal=console.is_terminal,
        color_system=console.color_system,  # type: ignore[arg-type]
        soft_wrap=False,
    )
    draw(offscreen, answer)
    file = offscreen.file
    assert isinstance(file, io.StringIO)
    return Text.from_ansi(file.getvalue().rstrip("\n"))


async def watch(
    read: Callable[[], Awaitable[Any]],
    draw: Callable[[Console, Any], None],
    fmt: Format,
    every: float,
) -> None:
    """Read an answer and show it every `every` seconds until Ctrl-C: redrawn in place on a
    terminal, one after another elsewhere, one JSON answer per line with `--format json`."""
    import asyncio

    from rich.live import Live

    from majordomus.loops import within

    console = stdout()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)

    async def pause() -> None:
        await within(every, stop.wait())

    collecting()  # it redraws until Ctrl-C: from here, garbage is collected
    try:
        if fmt is Format.json or not console.is_terminal:
            while not stop.is_set():
                answer = await read()
                if fmt is Format.json:
                    print_json(answer)
                else:
                    draw(console, answer)
                    console.print()
                await pause()
            return
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while not stop.is_set():
                live.update(picture(console, draw, await read()), refresh=True)
                await pause()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


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
    """Say so when no worker is beating, naming the Redis or API looked at: the execution
    would only wait. An API that cannot say (an older one, without `queue.workers`) is
    passed over in silence; straight on Redis, a failure is the command's."""
    from majordomus.reports import WorkerReport

    try:
        answer = await t.call(registry().require("queue.workers"), {})
        report = typed(answer, WorkerReport, t.where)
    except MajordomusError:
        if isinstance(t, Direct):
            raise
        return
    if not any(not w.silent and w.accepting for w in report.workers):
        errors.print(
            f"no worker is taking work on {t.where}: it stays queued until one starts "
            "(majordomus worker, on the same Redis)",
            style="yellow",
            highlight=False,
            markup=False,
        )


async def follow_to_end(
    t: Transport,
    execution_id: str,
    title: str,
    fmt: Format,
    after: int = 0,
    *,
    answer: bool = False,
) -> int:
    """Show an execution's events until it is final; answers the exit code of its outcome.
    With `--format json` it prints the final snapshot, or with `answer` the output alone (a
    failure then as the one error line on stderr).

    The first Ctrl-C asks it to cancel and goes on following; a second stops following and
    leaves it running, saying how to follow it again.
    """
    import asyncio

    from majordomus.cli.render import Follower, outcome
    from majordomus.engine import ended_badly
    from majordomus.store.failures import StoreFailure

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
    collecting()  # an execution may go on for hours: from here, garbage is collected
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
    if snap.state == "failed" and isinstance(snap.retried_as, str):
        # A retry chain's last attempt carries the outcome: follow on to the next one.
        code = snap.error.code if not isinstance(snap.error, msgspec.UnsetType) else "?"
        typer.echo(
            f"attempt {snap.attempt} ({execution_id}) failed: {code}; retried as "
            f"{snap.retried_as}, following it",
            err=True,
        )
        return await follow_to_end(t, snap.retried_as, title, fmt, answer=answer)
    if fmt is Format.json and answer:
        if snap.state == "succeeded":
            print_json(final.get("output"))
        else:
            say_error(ended_badly(snap))
    elif fmt is Format.json:
        print_json(final)
    else:
        outcome(console, errors, snap)
    return exit_code_of(snap)


ANY_CAPABILITY = "CAP"
"""The hidden command under `run` that any name no other command has reaches: that name is
the capability to start, with `--input` alone (one only the API knows, or none at all)."""

FOLLOWING_HELP = (
    "Ctrl-C asks it to cancel and keeps following until it stops; a second Ctrl-C leaves it "
    "running and says how to follow it again (majordomus follow ID). Not on a terminal: plain "
    "lines, no bar. --detach starts it, prints its id and returns; --format json prints the "
    "final snapshot (with --detach: the queued one)."
)


def run_help(start: Capability) -> str:
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


def run_capability_help(cap: Capability | None) -> str:
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


@dataclass(frozen=True)
class RunRequest:
    """What `run` was asked to start: the capability and its input as given."""

    capability: str
    text: str | None
    """`--input JSON`."""
    path: str | None
    """`--input-file FILE`."""
    members: dict[str, Any]
    """Members given as options, as their text."""
    detach: bool
    start: dict[str, Any] = field(default_factory=dict)
    """`executions.start`'s own members given as options (`--delay-ms`, `--priority`...),
    as their text."""


def run_command(start: Capability, cap: Capability | None) -> Callable[..., None]:
    """The command of `majordomus run <cap>`: `cap`'s input members as options, as its own
    command has them but none required and none positional (`--input` may carry them); for
    `cap` None, the command of any other name, with `--input` alone."""
    options: list[InputOption] = []
    if cap is not None:
        options = [replace(o, positional=False, required=False) for o in input_options(cap)]
    starting = start_options(start, {o.flag for o in options})

    def run(**values: Any) -> None:
        ctx: typer.Context = values.pop("ctx")
        fmt: Format = values.pop("output_format")
        api: str | None = values.pop("api")
        given = RunRequest(
            capability=cap.id if cap else str(ctx.info_name),
            text=values.pop("input"),
            path=values.pop("input_file"),
            members={o.member: values[o.param] for o in options if values.get(o.param) is not None},
            detach=values.pop("detach"),
            start={o.member: values[o.param] for o in starting if values.get(o.param) is not None},
        )
        execute(lambda: start_and_follow(start, cap, given, fmt, api), fmt)

    params = [_keyword("ctx", inspect.Parameter.empty, typer.Context)]
    params += [_typer_parameter(o) for o in options]
    params += [_typer_parameter(o) for o in starting]
    params += [
        _keyword(
            "input",
            typer.Option(None, "--input", "-i", metavar="JSON", help="Its input, a JSON object."),
            str | None,
        ),
        _keyword(
            "input_file",
            typer.Option(
                None,
                "--input-file",
                "-f",
                metavar="FILE",
                help="Read the input from FILE (- for stdin).",
            ),
            str | None,
        ),
        _keyword("detach", _detach_option(), bool),
        _keyword("output_format", _format_option(), Format),
        _keyword("api", _api_option(), str | None),
    ]
    name = "run_" + (cap.id.replace(".", "_") if cap else "any")
    return _signed(run, params, name, run_capability_help(cap))


def run_group(start: Capability, reg: Registry) -> typer.Typer:
    """`majordomus run CAP`, the command of `executions.start`: one command per capability
    that can run (`executable`), its input as options, each made when it is first used."""
    return typer.Typer(
        cls=deferred_group(functools.partial(_run_makers, start, reg), RunGroup),
        help=run_help(start),
        no_args_is_help=True,
        subcommand_metavar="CAP [ARGS]...",
    )


def _run_makers(start: Capability, reg: Registry) -> dict[str, Callable[[], Any]]:
    makers: dict[str, Callable[[], Any]] = {
        cap.id: functools.partial(_run_command_of, start, cap) for cap in reg if cap.executable
    }
    makers[ANY_CAPABILITY] = functools.partial(_run_command_of, start, None)
    return makers


def _run_command_of(start: Capability, cap: Capability | None) -> Any:
    """The command of `majordomus run <cap>` (of any other name, for `cap` None), made now."""
    if cap is None:
        return made_command(ANY_CAPABILITY, run_command(start, None), hidden=True)
    return made_command(cap.id, run_command(start, cap), short_help=escape(cap.title))


START_OWN = ("capability", "input", "episode")
"""Members of `executions.start`'s input that `run` fills itself (the capability named, its
input from the options or `--input`, the episode none); the rest are options of `run`."""


def start_options(start: Capability, taken: set[str]) -> list[InputOption]:
    """`executions.start`'s own members (when, priority, idempotency key) as options of
    `run <cap>`, each `--<member>`, or `--start-<member>` where the capability's input
    already has that flag (`executions.demonstrate --delay-ms` is its own)."""
    options = []
    for o in input_options(start):
        if o.member in START_OWN:
            continue
        flag = o.flag if o.flag not in taken else "--start-" + o.flag.removeprefix("--")
        options.append(
            replace(o, param="start_" + o.param, flag=flag, positional=False, required=False)
        )
    return options


def input_of(cap: Capability | None, given: RunRequest) -> Any:
    """The input to start with: `--input` (or its file), its members replaced by the options."""
    raw = read_input(given.text, given.path)
    if cap is None or not given.members:
        return raw
    members = typed_input(cap, given.members)
    if raw is None:
        return members
    if not isinstance(raw, dict):
        raise invalid_input(
            "the input is not a JSON object, so options cannot give its members",
            "give the whole input as --input JSON, or each member as an option",
        )
    return {**raw, **members}


async def start_and_follow(
    start: Capability,
    cap: Capability | None,
    given: RunRequest,
    fmt: Format,
    api: str | None,
    *,
    answer: bool = False,
) -> int | None:
    """Start `given` and follow it to its end. `answer`: as the capability's own command,
    whose `--format json` is its output (the final snapshot, for `run`)."""
    raw_input = input_of(cap, given)
    capability = given.capability

    async def work(t: Transport) -> int:
        request: dict[str, Any] = {"capability": capability}
        if raw_input is not None:  # none given: left out, as the schema says (an object)
            request["input"] = raw_input
        request.update(typed_input(start, given.start))
        snap = await t.call(start, request)
        execution_id = typed(snap, ExecutionSnapshot, t.where).id
        if given.detach:
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
        return await follow_to_end(t, execution_id, capability, fmt, answer=answer)

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


def made_command(name: str, function: Callable[..., None], **options: Any) -> Any:
    """`function` as the command `name` (with typer's `options`), made now as typer makes
    the app's commands."""
    inner = typer.Typer()
    inner.command(name=name, cls=PlainCommand, **options)(function)
    return typer.main.get_group(inner).commands[name]


def group_help(prefix: tuple[str, ...]) -> str:
    return GROUP_HELP.get(prefix[-1], f"The {' '.join(prefix)} capabilities.")


def register(app: typer.Typer) -> None:
    """Mount every capability's command, and `follow`, on `app` (once). Every clash is
    refused here; the commands under a group are made when they are first used."""
    if id(app) in _MOUNTED:
        return
    reg = registry()
    taken = _existing_names(app) | set(OWN_COMMANDS)
    prefixes: set[tuple[str, ...]] = set()
    leaves: set[tuple[str, ...]] = set()
    under: dict[str, list[Capability]] = {}
    for cap in reg:
        path = cap.exposure.cli_path
        if not path:
            continue
        _refuse_clash(cap, path, taken, prefixes, leaves)
        prefixes.update(path[:depth] for depth in range(1, len(path)))
        leaves.add(tuple(path))
        if len(path) == 1:
            mount(app, cap, path[0], reg, later=True)
        elif path[0] in under:
            under[path[0]].append(cap)
        else:
            caps = under[path[0]] = [cap]
            group = typer.Typer(
                cls=deferred_group(functools.partial(group_makers, caps, reg)),
                help=group_help(path[:1]),
                no_args_is_help=True,
            )
            app.add_typer(group, name=path[0])
    app.command("follow", cls=PlainCommand)(follow)
    _MOUNTED.add(id(app))


def group_makers(caps: list[Capability], reg: Registry) -> dict[str, Callable[[], Any]]:
    """The makers of a top-level group's commands (`caps`, whose paths all start with its
    name), by name, in typer's order: its commands, then its groups (typer lists those
    after), each where the first capability under it is."""
    commands: dict[str, list[Capability]] = {}
    groups: dict[str, list[Capability]] = {}
    for cap in caps:
        path = cap.exposure.cli_path or ()
        command = len(path) == 2 and cap.id != "executions.start"
        (commands if command else groups).setdefault(path[1], []).append(cap)
    return {
        name: functools.partial(_subtree, name, under, reg)
        for name, under in (*commands.items(), *groups.items())
    }


def _subtree(name: str, caps: list[Capability], reg: Registry) -> Any:
    """The command (or the group, with what is below it) `name` of a top-level group, made
    now from the capabilities under it."""
    return group_commands(caps, reg)[name]


def mount(
    parent: typer.Typer, cap: Capability, name: str, reg: Registry, *, later: bool = False
) -> None:
    """The command of one capability, as `name` on `parent`; `later`, made when it is first
    used (`DeferredCommand`)."""
    if cap.id == "executions.start":
        short = f"{cap.title} and follow it live to its end."
        parent.add_typer(run_group(cap, reg), name=name, short_help=escape(short))
    elif later:

        def stand_in() -> None: ...

        stand_in.__doc__ = command_help(cap)
        make = functools.partial(_capability_command_of, cap, name)
        cls = type("CapabilityCommand", (DeferredCommand,), {"make": staticmethod(make)})
        parent.command(name=name, short_help=escape(cap.title), cls=cls)(stand_in)
    else:
        parent.command(name=name, short_help=escape(cap.title), cls=PlainCommand)(
            capability_command(cap)
        )


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


def _capability_command_of(cap: Capability, name: str) -> Any:
    """The command of `cap`, as `name`, made now."""
    return made_command(name, capability_command(cap), short_help=escape(cap.title))


def group_commands(caps: list[Capability], reg: Registry) -> dict[str, Any]:
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
        mount(parent, cap, path[-1], reg)
    return dict(typer.main.get_group(inner).commands)


def _refuse_clash(
    cap: Capability,
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
            f"majordomus: the command of capability {cap.id!r} clashes: {clash}; "
            "declare it with another cli=(...) path"
        )
