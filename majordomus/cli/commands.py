"""The CLI's capability commands, made from the registry, and what `run` and `follow` do.

Every capability with a CLI path has a typer command at that path (mounted by `tree`): its
options are the members of its input type (`--after`, `--limit`, ...; a required `id` is a
positional argument), its help is its description, and `--format text|json` and `--api URL`
are on every one; a read of state (a query that answers directly: `majordomus queue`,
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
runs, so making the commands (`tree`) and drawing their help loads none of it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import typer

from majordomus.cli.help import (
    INTERRUPTED,
    Format,
    api_option,
    command_help,
    escape,
    format_option,
    run_capability_help,
)
from majordomus.cli.transport import Direct, Transport, transport
from majordomus.client.transports import store_failure, typed
from majordomus.config import settings
from majordomus.docs import type_text
from majordomus.docstrings import field_docs
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


def registry() -> Registry:
    """The process's registry: the built-ins and the modules of `MAJORDOMUS_CAPABILITIES`."""
    return load_capabilities(settings().capabilities)


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
    params.append(_keyword("output_format", format_option(), Format))
    params.append(_keyword("api", api_option(), str | None))
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
        _keyword("output_format", format_option(), Format),
        _keyword("api", api_option(), str | None),
    ]
    name = "run_" + (cap.id.replace(".", "_") if cap else "any")
    return _signed(run, params, name, run_capability_help(cap))


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
    output_format: Format = format_option(),
    api: str | None = api_option(),
) -> None:
    """Follow an execution live to its end, as `majordomus run` does, from any shell.

    Exits as `majordomus run` does (0 succeeded, 1 failed, 3 cancelled, ...); Ctrl-C asks it
    to cancel, a second Ctrl-C stops following.
    """
    follow_execution(execution_id, after, output_format, api)


def follow_execution(execution_id: str, after: int, output_format: Format, api: str | None) -> None:
    """`majordomus follow ID`: the execution's events from `after` to its end."""

    async def body() -> int | None:
        async def work(t: Transport) -> int:
            answer = await t.call(registry().require("executions.get"), {"id": execution_id})
            snap = typed(answer, ExecutionSnapshot, t.where)
            return await follow_to_end(t, execution_id, snap.capability, output_format, after)

        require_execution_id(execution_id)
        return await using(api, work)

    execute(body, output_format)
