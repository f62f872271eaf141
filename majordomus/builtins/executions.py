"""The `executions.*` built-ins (SPEC 3): start, list, get, events, cancel, wait, protocol.

Each is declared once here, like any user's capability; its route, tool and command are
projections. The control capabilities answer directly (they are not themselves started as
executions) and declare that alike, as `**CONTROL`; `executions.demonstrate` is an ordinary
capability, runnable directly or as an execution, that exercises every kind of report.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.builtins.common import Cursor, NonNegative, control, engine_of
from majordomus.config import clamp
from majordomus.ids import ExecutionId
from majordomus.model import (
    CancelOutput,
    EventHistory,
    ExecutionList,
    ExecutionSnapshot,
    ProtocolInfo,
    StoredEventHistory,
)
from majordomus.priorities import Priority
from majordomus.registry import capability
from majordomus.schemas import INPUT_OF
from majordomus.start_options import StartOptions
from majordomus.states import ExecutionState
from majordomus.store import clock

if TYPE_CHECKING:
    from majordomus.context import Context

CONTROL = control("executions")
"""Stable, tagged `executions`, answering directly."""

# -- executions.start ---------------------------------------------------------------------


DELAY_BOUND_MS = 366 * 24 * 3600 * 1000
"""The bound of `delay_ms` (366 days): a longer delay is clamped to it."""

IdempotencyKey = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class StartInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.start`."""

    capability: str
    input: Annotated[dict[str, Any], msgspec.Meta(extra_json_schema={INPUT_OF: "capability"})] = {}
    """The capability's input, a JSON object validated against its own schema; absent, it
    is the empty object."""
    episode: str | None = None
    """The episode handle, for MCP clients without a session (2026-07-28)."""
    start_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    """When to start it (RFC 3339 with an offset): it waits `queued`, holding no worker,
    and starts within milliseconds of this time; a time past starts it now."""
    delay_ms: NonNegative | None = None
    """Start it this many milliseconds from now (bound: 366 days). Given with `start_at`,
    it starts at the later of the two."""
    priority: Priority | None = None
    """`low`, `normal` or `high`; absent: the capability's own. Higher levels are taken
    first; a lower one waits at most twice `MAJORDOMUS_PRIORITY_AGING_SECONDS` behind
    newer higher ones."""
    idempotency_key: IdempotencyKey | None = None
    """A start with a key used before (within the retention) answers that execution
    instead of creating one, on every surface and replica; with another capability or
    input it is refused, naming that execution."""
    timeout_ms: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Stop it, and fail it `timed_out`, after this many milliseconds of running: a bound
    within its capability's own timeout (a longer one is the capability's)."""

    def options(self) -> StartOptions:
        """How the execution is to start, the input's times made one due time: the later
        of `start_at` and now + `delay_ms` when both are given."""
        due: list[int] = []
        if self.delay_ms is not None:
            due.append(clock.now_ms() + min(self.delay_ms, DELAY_BOUND_MS))
        if self.start_at is not None:
            due.append(int(self.start_at.timestamp() * 1000))
        due_ms = max(due) if due else None
        return StartOptions(
            start_at_ms=due_ms,
            priority=self.priority,
            idempotency_key=self.idempotency_key,
            timeout_ms=self.timeout_ms,
        )


@capability(
    "executions.start",
    kind="command",
    input=StartInput,
    output=ExecutionSnapshot,
    title="Start an execution",
    description=(
        "Start a capability as an execution and answer at once with its queued snapshot. "
        "The input is validated against the capability's schema and redacted before it is "
        "shown anywhere. Follow it with executions.events, executions.wait or the live channel."
    ),
    mcp="majordomus_execution_start",
    http=("POST", "/api/v1/executions/start"),
    cli=("run",),
    **CONTROL,
)
async def start(ctx: Context, inp: StartInput) -> ExecutionSnapshot:
    return await engine_of(ctx).start(
        inp.capability,
        inp.input,
        actor=ctx.actor,
        episode=ctx.episode or inp.episode,
        options=inp.options(),
    )


# -- executions.list ----------------------------------------------------------------------


class ListInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.list`."""

    state: ExecutionState | None = None
    capability: str | None = None
    episode: str | None = None
    limit: NonNegative | None = None
    """How many, newest first; the default and the bound are both 200."""
    before: ExecutionId | None = None
    """Only executions created before this one: the last id of the previous page gives the
    next (older) page, however many were created since."""


@capability(
    "executions.list",
    kind="query",
    input=ListInput,
    output=ExecutionList,
    title="List executions",
    description="Executions newest first, filtered by state, capability or episode.",
    mcp="majordomus_executions",
    http=("GET", "/api/v1/executions"),
    cli=("executions", "list"),
    **CONTROL,
)
async def list_executions(ctx: Context, inp: ListInput) -> ExecutionList:
    return await engine_of(ctx).list(inp.state, inp.capability, inp.episode, inp.limit, inp.before)


# -- executions.get -----------------------------------------------------------------------


class GetInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.get`."""

    id: ExecutionId


@capability(
    "executions.get",
    kind="query",
    input=GetInput,
    output=ExecutionSnapshot,
    title="Show one execution",
    description="One execution's snapshot: state, progress, steps, output or error.",
    mcp="majordomus_execution",
    http=("GET", "/api/v1/executions/get"),
    cli=("executions", "show"),
    **CONTROL,
)
async def get(ctx: Context, inp: GetInput) -> ExecutionSnapshot:
    return await engine_of(ctx).get(inp.id)


# -- executions.events --------------------------------------------------------------------


class EventsInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.events`."""

    id: ExecutionId
    """The execution's id."""
    after: Cursor | None = None
    """Only events after this sequence number: the cursor a reconnecting client holds."""
    limit: NonNegative | None = None
    """How many, oldest first; the default and the bound are both `500`."""


@capability(
    "executions.events",
    kind="query",
    input=EventsInput,
    output=EventHistory,
    title="Page an execution's events",
    description=(
        "The retained events of one execution, oldest first, after a sequence number. The "
        "page carries the cursor to open the live channel with, so nothing is missed "
        "between the history and the stream; `truncated` says older events were dropped."
    ),
    mcp="majordomus_execution_events",
    http=("GET", "/api/v1/executions/events"),
    cli=("executions", "events"),
    **CONTROL,
)
async def events(ctx: Context, inp: EventsInput) -> StoredEventHistory:
    # The events as stored: a caller that wants them typed gets an `EventHistory`.
    return await engine_of(ctx).stored_events(inp.id, inp.after, inp.limit)


# -- executions.cancel --------------------------------------------------------------------


class CancelInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.cancel`."""

    id: ExecutionId


@capability(
    "executions.cancel",
    kind="command",
    input=CancelInput,
    output=CancelOutput,
    title="Cancel an execution",
    description=(
        "Ask an execution to stop. A queued one is cancelled at once; a running one moves to "
        "cancelling and its handler sees the flag within 100 ms."
    ),
    mcp="majordomus_execution_cancel",
    http=("POST", "/api/v1/executions/cancel"),
    cli=("executions", "cancel"),
    **CONTROL,
)
async def cancel(ctx: Context, inp: CancelInput) -> CancelOutput:
    return await engine_of(ctx).cancel(inp.id, by=ctx.actor)


# -- executions.protocol ------------------------------------------------------------------


class ProtocolInput(msgspec.Struct, forbid_unknown_fields=True):
    """`executions.protocol` takes nothing."""


@capability(
    "executions.protocol",
    kind="query",
    input=ProtocolInput,
    output=ProtocolInfo,
    title="Describe the live protocol",
    description="The live channel's contract, the event and stream schemas, and every limit.",
    mcp="majordomus_execution_protocol",
    http=("GET", "/api/v1/executions/protocol"),
    cli=("executions", "protocol"),
    **CONTROL,
)
async def protocol(ctx: Context, inp: ProtocolInput) -> ProtocolInfo:
    return engine_of(ctx).protocol()


# -- executions.wait ----------------------------------------------------------------------


class WaitInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.wait`."""

    id: ExecutionId
    timeout_ms: NonNegative | None = None
    """How long to wait; the default is 30,000 and the bound 60,000."""


@capability(
    "executions.wait",
    kind="query",
    input=WaitInput,
    output=ExecutionSnapshot,
    title="Wait for an execution to finish",
    description=(
        "Answer the snapshot as soon as the execution is final, or when the timeout passes "
        "(as it stands then): a long poll for clients without the live channel."
    ),
    mcp="majordomus_execution_wait",
    http=("GET", "/api/v1/executions/wait"),
    cli=("executions", "wait"),
    **CONTROL,
)
async def wait(ctx: Context, inp: WaitInput) -> ExecutionSnapshot:
    return await engine_of(ctx).wait(
        inp.id, inp.timeout_ms, on_event=ctx.on_progress, bound_ms=ctx.wait_bound_ms
    )


# -- executions.demonstrate ---------------------------------------------------------------


class DemoInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.demonstrate`; values above a bound are clamped to it."""

    steps: NonNegative = 3
    """Steps to walk; bound 100."""
    delay_ms: NonNegative = 0
    """Milliseconds each step takes; bound 10,000."""
    fail_at: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Fail at this step with `internal`."""
    log_lines: NonNegative = 1
    """Log lines per step; bound 1,000 (a chatty run overflows the 500-event cap)."""

    def __post_init__(self) -> None:
        self.steps = clamp(self.steps, 3, 100)
        self.delay_ms = clamp(self.delay_ms, 0, 10_000)
        self.log_lines = clamp(self.log_lines, 1, 1000)


class DemoOutput(msgspec.Struct):
    steps: int
    elapsed_ms: int
    observed: bool
    """True only inside an execution, where the reports became events."""


class DemonstrationFailure(RuntimeError):
    """The failure `fail_at` asks for: an unexpected exception, reported as `internal`."""


@capability(
    "executions.demonstrate",
    kind="query",
    input=DemoInput,
    output=DemoOutput,
    title="Demonstrate an execution",
    description=(
        "Walk a number of steps, each with log lines, a completed step and progress, so every "
        "surface can be seen working; fail at a step on request; honours cancellation."
    ),
    stability="stable",
    cancellable=True,
    tags=("executions", "demo"),
    mcp="majordomus_demonstrate_execution",
    http=("GET", "/api/v1/executions/demonstrate"),
    cli=("executions", "demonstrate"),
)
async def demonstrate(ctx: Context, inp: DemoInput) -> DemoOutput:
    began = time.monotonic()
    for i in range(1, inp.steps + 1):
        ctx.raise_if_cancelled()
        name = f"step-{i}"
        ctx.step(name, f"Step {i} of {inp.steps}")
        for line in range(1, inp.log_lines + 1):
            ctx.log(f"step {i}: line {line} of {inp.log_lines}")
        if inp.fail_at == i:
            ctx.step_done(name, ok=False, detail="failing as asked (fail_at)")
            raise DemonstrationFailure(f"demonstration failed at step {i} as asked")
        await ctx.sleep(inp.delay_ms / 1000)
        ctx.raise_if_cancelled()
        ctx.step_done(name, ok=True)
        ctx.progress(i, inp.steps, f"step {i} of {inp.steps}")
    elapsed = int((time.monotonic() - began) * 1000)
    return DemoOutput(inp.steps, elapsed, ctx.observed)


__all__ = ["DemoInput", "DemoOutput", "UNSET", "UnsetType"]
