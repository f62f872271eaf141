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

import majordomus.bulk as bulk
from majordomus import clock
from majordomus.builtins.common import Cursor, NonNegative, control, engine_of
from majordomus.bulk import BULK_RETRY, CancelMatchingOutput, RetryMatchingOutput
from majordomus.config import clamp
from majordomus.ids import ExecutionId
from majordomus.matching import Match, MatchCount, Order, Sort
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


class ListInput(Match, forbid_unknown_fields=True, kw_only=True):
    """The input of `executions.list`: the filter, then the page and its order."""

    limit: NonNegative | None = None
    """How many; the default and the bound are both 200."""
    before: ExecutionId | None = None
    """Only executions created before this one: the last id of the previous page gives the
    next (older) page, however many were created since."""
    sort: Sort = "created"
    """`created`: the newest matches. `duration` or `state`: the first of the newest 5,000
    matches in that order (a time range narrows them to a period); an active execution has
    no duration yet and comes last; ties newest first."""
    order: Order = "desc"
    """`desc` (newest, longest, or last in the lifecycle first) or `asc`."""


@capability(
    "executions.list",
    kind="query",
    input=ListInput,
    output=ExecutionList,
    title="List executions",
    description=(
        "Executions newest first, filtered by state, capability, episode, a time range, or "
        "the value of an input member its capability declares searchable; sorted by "
        "creation, duration or state."
    ),
    mcp="majordomus_executions",
    http=("GET", "/api/v1/executions"),
    cli=("executions", "list"),
    **CONTROL,
)
async def list_executions(ctx: Context, inp: ListInput) -> ExecutionList:
    return await engine_of(ctx).list(
        limit=inp.limit, before=inp.before, match=inp.matching(), sort=inp.sort, order=inp.order
    )


# -- executions.count ---------------------------------------------------------------------


class CountInput(Match, forbid_unknown_fields=True, kw_only=True):
    """The input of `executions.count`: the filter of `executions.list`."""


@capability(
    "executions.count",
    kind="query",
    input=CountInput,
    output=MatchCount,
    title="Count executions matching a filter",
    description=(
        "How many executions match a filter (the list's), and how many of them "
        "executions.cancel_matching and executions.retry_matching would act on: what to "
        "show before confirming one."
    ),
    mcp="majordomus_executions_count",
    http=("GET", "/api/v1/executions/count"),
    cli=("executions", "count"),
    **CONTROL,
)
async def count(ctx: Context, inp: CountInput) -> MatchCount:
    return await engine_of(ctx).count(inp.matching())


# -- executions.cancel_matching and executions.retry_matching -------------------------------


class CancelMatchingInput(Match, forbid_unknown_fields=True, kw_only=True):
    """The input of `executions.cancel_matching`: the filter of `executions.list`."""


class RetryMatchingInput(Match, forbid_unknown_fields=True, kw_only=True):
    """The input of `executions.retry_matching`: the filter of `executions.list`."""


@capability(
    "executions.cancel_matching",
    kind="command",
    input=CancelMatchingInput,
    output=CancelMatchingOutput,
    title="Cancel every execution matching a filter",
    description=(
        "Cancel every queued or running execution a filter matches (the list's), created "
        "before this action: each cancel atomic, as executions.cancel's. It runs as an "
        "execution of its own (progress per page; cancel it to stop it); interrupted, the "
        "same filter again does the rest. Count them first with executions.count."
    ),
    stability="stable",
    tags=("executions",),
    cancellable=True,
    retry=BULK_RETRY,
    mcp="majordomus_executions_cancel_matching",
    http=("POST", "/api/v1/executions/cancel_matching"),
    cli=("executions", "cancel-matching"),
)
async def cancel_matching(ctx: Context, inp: CancelMatchingInput) -> CancelMatchingOutput:
    return await bulk.cancel_matching(
        engine_of(ctx),
        inp.matching(),
        by=ctx.actor,
        own_id=getattr(ctx, "execution_id", None),
        progress=lambda done, total: ctx.progress(done, total, f"{done} of {total} cancelled"),
        stop=ctx.raise_if_cancelled,
    )


@capability(
    "executions.retry_matching",
    kind="command",
    input=RetryMatchingInput,
    output=RetryMatchingOutput,
    title="Retry every failed or cancelled execution matching a filter",
    description=(
        "Start again every failed or cancelled execution a filter matches (the list's), "
        "created before this action and not retried yet, each as a new execution linked to "
        "it (retry_of), with its input, actor and priority; one whose input held a secret "
        "is passed by (secrets are not kept). It runs as an execution of its own; "
        "interrupted, the same filter again does the rest, never retrying one twice."
    ),
    stability="stable",
    tags=("executions",),
    cancellable=True,
    retry=BULK_RETRY,
    mcp="majordomus_executions_retry_matching",
    http=("POST", "/api/v1/executions/retry_matching"),
    cli=("executions", "retry-matching"),
)
async def retry_matching(ctx: Context, inp: RetryMatchingInput) -> RetryMatchingOutput:
    return await bulk.retry_matching(
        engine_of(ctx),
        inp.matching(),
        own_id=getattr(ctx, "execution_id", None),
        progress=lambda done, total: ctx.progress(done, total, f"{done} of {total} retried"),
        stop=ctx.raise_if_cancelled,
    )


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
