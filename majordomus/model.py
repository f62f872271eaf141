"""The wire types of executions: the twelve events, the snapshot, pages, control messages.

Each type is a msgspec Struct, so validation, encoding and JSON Schema come from one
definition. Events are a tagged union on `type` with their payload under `data`, the
envelope of `schemas/EventHistory.schema.json`. Optional members are `UNSET` and so
omitted, never null.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.errors import ExecutionError
from majordomus.priorities import Priority
from majordomus.states import ExecutionState

Severity = Literal["info", "warning", "error"]
LogStream = Literal["stdout", "stderr", "handler"]
Actor = Literal["http", "mcp", "cli", "internal"]

ACTOR_HEADER = "Majordomus-Actor"
"""The request header that names the client surface an HTTP call comes through. The API
takes it for the execution's `actor` (and a cancel's `by`) only when it is one of
`CLIENT_ACTORS`, and answers as `http` otherwise: it is attribution, not access (the token
decides who may call)."""

CLIENT_ACTORS: frozenset[str] = frozenset({"cli"})
"""The surfaces that call the API on a user's behalf and may say so in `ACTOR_HEADER`."""


class EventEnvelope(msgspec.Struct, tag_field="type", kw_only=True):
    """What every event of an execution has (`Event`): its type is the tag of its class."""

    schema_version: str
    event_id: str
    execution_id: str
    sequence: int
    timestamp: str

    @property
    def type(self) -> str:
        """Its type, `execution.created`...: the union's tag, which msgspec keeps on the
        class (and writes as the `type` member)."""
        return str(self.__struct_config__.tag)


Event = EventEnvelope
"""Any event of an execution, for `isinstance` (`ExecutionEvent` is their union)."""


class CreatedData(msgspec.Struct):
    capability: str
    title: str
    input: Any


class QueuedData(msgspec.Struct, omit_defaults=True):
    ahead: int
    due_at: str | UnsetType = UNSET
    """When a delayed start is due (RFC 3339 UTC); absent: now."""


class ProgressView(msgspec.Struct, omit_defaults=True):
    """How far along an execution is."""

    current: int
    total: int | None = None
    message: str | None = None


class StepStartedData(msgspec.Struct):
    name: str
    title: str


class StepCompletedData(msgspec.Struct, omit_defaults=True):
    name: str
    ok: bool
    detail: str | None = None


class LogData(msgspec.Struct):
    stream: LogStream
    message: str


class ExecutionDiagnostic(msgspec.Struct, omit_defaults=True):
    """A structured finding an execution reported on its way, distinct from its outcome."""

    severity: Severity
    code: str
    summary: str
    detail: str | None = None
    suggestion: str | None = None


class CancellingData(msgspec.Struct):
    by: str


class CompletedData(msgspec.Struct):
    output: Any


class FailedData(msgspec.Struct):
    error: ExecutionError


class ExecutionCreated(EventEnvelope, tag="execution.created"):
    data: CreatedData


class ExecutionQueued(EventEnvelope, tag="execution.queued"):
    data: QueuedData


class ExecutionStarted(EventEnvelope, tag="execution.started"):
    pass


class ExecutionProgress(EventEnvelope, tag="execution.progress"):
    data: ProgressView


class ExecutionStepStarted(EventEnvelope, tag="execution.step.started"):
    data: StepStartedData


class ExecutionStepCompleted(EventEnvelope, tag="execution.step.completed"):
    data: StepCompletedData


class ExecutionLog(EventEnvelope, tag="execution.log"):
    data: LogData


class ExecutionDiagnosticEvent(EventEnvelope, tag="execution.diagnostic"):
    data: ExecutionDiagnostic


class ExecutionCancelling(EventEnvelope, tag="execution.cancelling"):
    data: CancellingData


class ExecutionCancelled(EventEnvelope, tag="execution.cancelled"):
    pass


class ExecutionCompleted(EventEnvelope, tag="execution.completed"):
    data: CompletedData


class ExecutionFailed(EventEnvelope, tag="execution.failed"):
    data: FailedData


ExecutionEvent = Union[
    ExecutionCreated,
    ExecutionQueued,
    ExecutionStarted,
    ExecutionProgress,
    ExecutionStepStarted,
    ExecutionStepCompleted,
    ExecutionLog,
    ExecutionDiagnosticEvent,
    ExecutionCancelling,
    ExecutionCancelled,
    ExecutionCompleted,
    ExecutionFailed,
]

EVENT_TYPES: tuple[str, ...] = tuple(
    t.__struct_config__.tag
    for t in ExecutionEvent.__args__  # type: ignore[attr-defined]
)
TERMINAL_EVENT_TYPES = frozenset({"execution.completed", "execution.failed", "execution.cancelled"})


class StepView(msgspec.Struct, omit_defaults=True):
    name: str
    title: str
    state: Literal["running", "completed", "failed"]
    started_at: str
    finished_at: str | UnsetType = UNSET
    detail: str | UnsetType = UNSET


class ExecutionLinks(msgspec.Struct, rename={"self_": "self"}):
    self_: str
    events: str
    cancel: str
    live: str


class ExecutionSnapshot(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One execution as it stands: the answer of `executions.get`."""

    id: str
    capability: str
    title: str
    state: ExecutionState
    created_at: str
    started_at: str | UnsetType = UNSET
    finished_at: str | UnsetType = UNSET
    duration_ms: int | UnsetType = UNSET
    input: Any
    output: Any | UnsetType = UNSET
    error: ExecutionError | UnsetType = UNSET
    progress: ProgressView | UnsetType = UNSET
    steps: list[StepView]
    """The first 200 steps (`limits.steps`)."""
    steps_dropped: int = 0
    """Steps it started beyond those, counted, not kept."""
    diagnostics: list[ExecutionDiagnostic]
    last_sequence: int
    event_count: int
    events_truncated: bool
    cancellable: bool
    actor: Actor
    episode: str | UnsetType = UNSET
    worker: str | UnsetType = UNSET
    attempt: int
    priority: Priority
    """Its level in the queue (`majordomus.priorities`)."""
    due_at: str | UnsetType = UNSET
    """When a delayed start is (or was) due, RFC 3339 UTC; absent: at once."""
    idempotency_key: str | UnsetType = UNSET
    """The key it was started with: a start with the same key answers this execution."""
    schedule: str | UnsetType = UNSET
    """The schedule whose tick started it."""
    retry_of: str | UnsetType = UNSET
    """The attempt this one retries (the previous execution of its retry chain)."""
    retried_as: str | UnsetType = UNSET
    """The attempt that retries this one (the next execution of its retry chain)."""
    collapsed: int = 0
    """How many later starts its capability's debounce or throttle collapsed into it
    (`majordomus.flow`): each was answered with it, so a start whose answer says more than
    0 is one of them, carried by this execution."""
    correlation_id: str
    links: ExecutionLinks


CURSOR_BOUND = 2**64 - 1
"""The largest cursor a reader may give: an event's sequence, and each part of a global
feed id (`<ms>-<n>`), is a part of a Redis stream id, an unsigned 64-bit integer. A larger
one is `invalid_input`; so is the feed id with both parts at the bound, after which no id
can follow."""


class EventHistory(msgspec.Struct):
    """The answer of `executions.events`: one page of an execution's retained history."""

    execution_id: str
    state: ExecutionState
    events: list[ExecutionEvent]
    last_sequence: int
    more: bool
    truncated: bool


class StoredForm(msgspec.Struct):
    """An answer in the form it was read from the store, for a capability whose declared
    output is the typed shape of the same JSON: what is passed through as stored is
    `msgspec.Raw`, so it encodes to that JSON without decoding it first. A surface that
    only encodes the answer (the HTTP route) sends it as it is; the engine decodes it into
    the declared output for every caller that wants typed values (`Engine.invoke`)."""


class StoredEventHistory(StoredForm):
    """`EventHistory` as read: the same members, its events the stored envelopes."""

    execution_id: str
    state: ExecutionState
    events: list[msgspec.Raw]
    last_sequence: int
    more: bool
    truncated: bool


event_decoder = msgspec.json.Decoder(ExecutionEvent)


def event_type_of(event: ExecutionEvent) -> str:
    """An event's `type` (the union's tag, which msgspec keeps on the class)."""
    return str(event.__struct_config__.tag)


def progress_text(progress: ProgressView) -> str:
    """A progress report as a person reads it: `3/10 resizing` (or `3` without a total)."""
    amount = (
        f"{progress.current}/{progress.total}"
        if progress.total is not None
        else str(progress.current)
    )
    return f"{amount} {progress.message}" if progress.message else amount


def describe_event(event: ExecutionEvent) -> str:
    """One event in a few words, as a person reads it: the line an MCP progress
    notification carries and the CLI prints for an event it draws no widget for."""
    if isinstance(event, ExecutionCreated):
        return f"created: {event.data.capability}"
    if isinstance(event, ExecutionQueued):
        return f"queued, {event.data.ahead} ahead"
    if isinstance(event, ExecutionStarted):
        return "running"
    if isinstance(event, ExecutionProgress):
        return progress_text(event.data)
    if isinstance(event, ExecutionStepStarted):
        return f"step {event.data.name} started: {event.data.title}"
    if isinstance(event, ExecutionStepCompleted):
        step = event.data
        outcome = "done" if step.ok else "failed"
        return f"step {step.name} {outcome}" + (f": {step.detail}" if step.detail else "")
    if isinstance(event, ExecutionLog):
        return f"log: {event.data.message}"
    if isinstance(event, ExecutionDiagnosticEvent):
        diag = event.data
        return f"{diag.severity} {diag.code}: {diag.summary}"
    if isinstance(event, ExecutionCancelling):
        return f"cancelling (asked by {event.data.by})"
    if isinstance(event, ExecutionCancelled):
        return "cancelled"
    if isinstance(event, ExecutionCompleted):
        return "succeeded"
    if isinstance(event, ExecutionFailed):
        return f"failed: {event.data.error.code}: {event.data.error.message}"
    return event_type_of(event)


class ExecutionList(msgspec.Struct):
    """The answer of `executions.list`: newest first, with the cluster's queue at a glance."""

    count: int
    active: int
    queued: int
    executions: list[ExecutionSnapshot]


class CancelOutput(msgspec.Struct):
    """The answer of `executions.cancel`."""

    outcome: Literal["requested", "already_requested", "already_finished"]
    cancellable: bool
    execution: ExecutionSnapshot


# -- the live channel's control messages (no sequence; same `{type, data}` envelope) --------


class StreamReadyData(msgspec.Struct, omit_defaults=True):
    protocol_version: str
    scope: Literal["all", "executions"]
    replayed: int
    truncated: bool
    heartbeat_seconds: float
    executions: list[str] | UnsetType = UNSET


class StreamLaggedData(msgspec.Struct, omit_defaults=True):
    dropped: int
    """Exactly how many events this channel was not sent: its client will never see them
    on this connection, and nothing it was sent is among them."""
    after: str | None = None
    """On the unscoped channel, the cursor of the last event sent before the gap: what was
    dropped lies after it and up to `upto`, and a channel opened with `after` set to it
    replays them (while the store still holds them)."""
    upto: str | None = None
    """On the unscoped channel, the cursor after the gap, where the channel goes on."""


class StreamClosingData(msgspec.Struct):
    reason: str


class StreamReady(msgspec.Struct, tag_field="type", tag="stream.ready"):
    data: StreamReadyData


class StreamLagged(msgspec.Struct, tag_field="type", tag="stream.lagged"):
    data: StreamLaggedData


class StreamClosing(msgspec.Struct, tag_field="type", tag="stream.closing"):
    data: StreamClosingData


StreamMessage = Union[StreamReady, StreamLagged, StreamClosing]
STREAM_TYPES: tuple[str, ...] = ("stream.ready", "stream.lagged", "stream.closing")


class LiveChannel(msgspec.Struct):
    path: str
    parameters: dict[str, str]
    headers: dict[str, str]


class ProtocolInfo(msgspec.Struct):
    """The answer of `executions.protocol`: the live channel's contract and every limit."""

    protocol_version: str
    live: LiveChannel
    heartbeat_seconds: float
    event_types: list[str]
    stream_types: list[str]
    event_schema: dict[str, Any]
    stream_schema: dict[str, Any]
    limits: dict[str, Any]
    settings: dict[str, Any]
