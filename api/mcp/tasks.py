"""MCP tasks (`io.modelcontextprotocol/tasks`, SEP-2663): a long tool call as a durable
execution the caller polls, is told about, cancels and finds again.

A client that declares the extension in a request's `_meta` capabilities and calls a tool
that may be a task (its capability's `task_support`, `optional` for whatever runs as an
execution) gets a `CreateTaskResult` at once, backed by a new execution; without the
declaration it gets today's answer, and a `required` tool refuses it (`-32021`). Everything
a task is lives in Redis (the execution, and its record in `majordomus.store.tasks`), so
`tasks/get`, `tasks/cancel` and `tasks/update` are answered by any API replica, before and
after a restart:

- status from the execution's state: queued, running and cancelling are `working`;
  succeeded is `completed` with the tool's result inlined (`structuredContent` included);
  failed is `completed` too, with the `isError` result the call would have answered
  (`failed` is for JSON-RPC errors, which an execution never ends with); cancelled is
  `cancelled`. A failed attempt that its capability's retry policy retried is followed to
  its last attempt, so a task ends once however many attempts it took;
- `statusMessage` from the latest progress report and step (the extension forbids progress
  notifications for tasks: progress travels here); `lastUpdatedAt` is the execution's last
  event; `ttlMs` runs from creation to the retention time past the end (or past now while
  it runs); `pollIntervalMs` is `POLL_INTERVAL_MS`;
- a task and its result name their execution in `_meta.majordomus.execution`, whose
  events a client (or a person in the console) can page.

A task id is `<execution id>.<secret>`, the secret 128 random bits of which only a hash is
stored: knowing an execution (every caller can list them) gives no task. A task answers
only to its owner: the episode named by the request (a 2025 session's bound episode, or a
2026-07-28 request's `_meta["majordomus/episode"]`), or without one the caller's bearer
token (hashed); any other caller is told it does not exist, exactly as for an unknown id.

This module is the extension and the task's state; pushing notifications is
`api.mcp.task_listen`'s, the 2025-11-25 shape of the same tasks `api.mcp.tasks_2025`'s.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import msgspec
from mcp import MCPError, types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import HEADER_MISMATCH, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from msgspec import UNSET, UnsetType
from pydantic import Field

from majordomus.api.errors import classify
from majordomus.api.mcp.episodes import EPISODE_META, HeldEpisodes, McpConnection
from majordomus.api.mcp.results import error_result, ok_result
from majordomus.clock import now_stamp, stamp_of
from majordomus.config import LIMITS, Settings
from majordomus.engine import Engine
from majordomus.errors import HTTP_STATUS, ExecutionError, MajordomusError
from majordomus.ids import EXECUTION_ID
from majordomus.model import (
    ExecutionCancelled,
    ExecutionCancelling,
    ExecutionCompleted,
    ExecutionEvent,
    ExecutionFailed,
    ExecutionProgress,
    ExecutionSnapshot,
    ExecutionStarted,
    ExecutionStepCompleted,
    ExecutionStepStarted,
    ProgressView,
    event_decoder,
    progress_text,
)
from majordomus.registry import Capability, TaskSupport
from majordomus.retries import MAX_ATTEMPTS
from majordomus.states import FINAL
from majordomus.store.tasks import TaskRead, TaskRecord, TaskStore

EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension's identifier, advertised in `server/discover`."""
POLL_INTERVAL_MS = 1000
"""The polling interval a task suggests (a subscribed client need not poll at all)."""
SECRET_BYTES = 16
"""Random bytes in a task id's secret part: 128 bits, base64url."""
SEPARATOR = "."
"""Between a task id's execution id and its secret (an execution id has no dot)."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]

# -- ids and owners -----------------------------------------------------------------------------


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def mint_task_id(execution_id: str) -> tuple[str, str]:
    """A new task id for `execution_id`, and the hash of its secret to store."""
    secret = secrets.token_urlsafe(SECRET_BYTES)
    return f"{execution_id}{SEPARATOR}{secret}", secret_hash(secret)


def parse_task_id(task_id: str) -> tuple[str, str] | None:
    """(execution id, secret) of a task id of ours, or None for anything else."""
    execution_id, sep, secret = task_id.rpartition(SEPARATOR)
    if not sep or not secret or len(secret) > 64 or EXECUTION_ID.match(execution_id) is None:
        return None
    return execution_id, secret


def owner_of(ctx: ServerRequestContext[Any, Any], binding: McpConnection) -> str:
    """Whom a task of this caller answers to: its episode, or else its bearer token.

    The episode is the one a 2025 session is bound to, or the one a 2026-07-28 request
    names in `_meta` (named, whether or not it is open now, so a task stays its owner's
    after the episode closed and is resumed under the same id).
    """
    if binding.kind == "session":
        episode = binding.episode
    else:
        meta: Mapping[str, Any] = ctx.meta or {}  # type: ignore[assignment]
        named = meta.get(EPISODE_META)
        episode = named if isinstance(named, str) and named else None
    if episode:
        return f"episode:{episode}"
    headers = getattr(ctx.request, "headers", None)
    token = headers.get("authorization") if headers is not None else None
    if token:
        return "token:" + hashlib.sha256(token.strip().encode()).hexdigest()[:32]
    return "anonymous"


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def declared_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the tasks extension."""
    caps = ctx.session.client_capabilities
    return bool(caps is not None and caps.extensions and EXTENSION in caps.extensions)


def missing_extension() -> MCPError:
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def task_not_found() -> MCPError:
    return MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


def check_routing_header(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """A `Mcp-Name` header must name the task the body names (the extension has clients
    send it for routing; a proxy that routed by a different one routed wrongly)."""
    headers = getattr(ctx.request, "headers", None)
    given = headers.get(MCP_NAME_HEADER) if headers is not None else None
    if given is not None and decode_header_value(given) != task_id:
        raise MCPError(HEADER_MISMATCH, f"{MCP_NAME_HEADER} header does not name the task")


def task_support_of(cap: Capability) -> TaskSupport:
    return cap.task_support if cap.executable else "forbidden"


# -- the wire ---------------------------------------------------------------------------------


class TaskBody(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A task as `tasks/get`, `notifications/tasks` and `CreateTaskResult` carry it (the
    extension's `DetailedTask`, `Result & Task`)."""

    task_id: str
    status: TaskStatus
    status_message: str | UnsetType = UNSET
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | UnsetType = UNSET
    result: dict[str, Any] | UnsetType = UNSET
    result_type: str | UnsetType = UNSET
    meta: dict[str, Any] | UnsetType = msgspec.field(default=UNSET, name="_meta")


class ListedTask(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """One task of an owner's listing (`majordomus://tasks`): its execution and where it
    stands. Its task id is not there: only the id's hash is kept, so only the client that
    created the task holds it; the execution (its snapshot, its events) is anyone's to read."""

    execution_id: str
    tool: str
    status: TaskStatus
    status_message: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    resource: str
    links: dict[str, Any]


class LegacyTaskBody(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A task in the 2025-11-25 shape (SEP-1686's `Task`: `ttl`, `pollInterval`)."""

    task_id: str
    status: TaskStatus
    status_message: str | UnsetType = UNSET
    created_at: str
    last_updated_at: str
    ttl: int | None
    poll_interval: int | UnsetType = UNSET


class TaskIdParams(types.RequestParams):
    """`tasks/get`, `tasks/cancel` (and the 2025 `tasks/result`): which task."""

    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskIdParams):
    """`tasks/update`: answers to a task's input requests (majordomus's tasks ask none)."""

    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


# -- the task's state ---------------------------------------------------------------------------


def epoch_ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


@dataclass
class StepSeen:
    name: str
    title: str
    state: Literal["running", "completed", "failed"]


@dataclass
class TaskState:
    """A task as it stands: its execution's state folded from the snapshot, then from each
    event the shared feed hands on, so a pushed notification and a `tasks/get` at the same
    moment say the same thing without a read of Redis per event.

    It keeps what the status and its message are made of: the state, the last step, the
    latest progress, the output or error, and the sequence and time of the last event.
    """

    task_id: str
    execution_id: str
    """The execution carrying the task now: the last attempt of its retry chain."""
    capability: str
    tool: str
    created_at: str
    created_ms: int
    state: str
    sequence: int
    updated_at: str
    progress: ProgressView | None = None
    step: StepSeen | None = None
    steps_kept: int = 0
    running_steps: set[str] = field(default_factory=set)
    output: Any = UNSET
    error: ExecutionError | None = None
    finished_at: str | None = None
    retried_as: str | None = None

    @classmethod
    def of(
        cls,
        task_id: str,
        record: TaskRecord,
        snap: ExecutionSnapshot,
        last_event: bytes | None,
    ) -> TaskState:
        updated = snap.created_at
        if last_event is not None:
            updated = event_decoder.decode(last_event).timestamp
        step = snap.steps[-1] if snap.steps else None
        return cls(
            task_id=task_id,
            execution_id=snap.id,
            capability=snap.capability,
            tool=record.tool,
            created_at=stamp_of(record.created_ms) if record.created_ms else snap.created_at,
            created_ms=record.created_ms or epoch_ms(snap.created_at),
            state=snap.state,
            sequence=snap.last_sequence,
            updated_at=updated,
            progress=snap.progress if isinstance(snap.progress, ProgressView) else None,
            step=StepSeen(step.name, step.title, step.state) if step is not None else None,
            steps_kept=len(snap.steps),
            running_steps={s.name for s in snap.steps if s.state == "running"},
            output=snap.output,
            error=snap.error if isinstance(snap.error, ExecutionError) else None,
            finished_at=snap.finished_at if isinstance(snap.finished_at, str) else None,
            retried_as=snap.retried_as if isinstance(snap.retried_as, str) else None,
        )

    # -- folding events --

    def apply(self, event: ExecutionEvent, steps_cap: int) -> None:
        """Fold one event of the current execution (one already folded is skipped), as the
        store folds it into the snapshot (`append.lua`) for what a task shows."""
        if event.sequence <= self.sequence or event.execution_id != self.execution_id:
            return
        self.sequence = event.sequence
        self.updated_at = event.timestamp
        if isinstance(event, ExecutionStarted):
            self.state = "running"
        elif isinstance(event, ExecutionProgress):
            self.progress = event.data
        elif isinstance(event, ExecutionStepStarted):
            if self.steps_kept < steps_cap:
                self.steps_kept += 1
                self.step = StepSeen(event.data.name, event.data.title, "running")
                self.running_steps.add(event.data.name)
        elif isinstance(event, ExecutionStepCompleted):
            self._step_done(event.data.name, event.data.ok, steps_cap)
        elif isinstance(event, ExecutionCancelling):
            self.state = "cancelling"
        elif isinstance(event, ExecutionCompleted):
            self.state, self.output, self.finished_at = (
                "succeeded",
                event.data.output,
                event.timestamp,
            )
        elif isinstance(event, ExecutionFailed):
            self.state, self.error, self.finished_at = "failed", event.data.error, event.timestamp
        elif isinstance(event, ExecutionCancelled):
            self.state, self.finished_at = "cancelled", event.timestamp

    def _step_done(self, name: str, ok: bool, steps_cap: int) -> None:
        outcome: Literal["completed", "failed"] = "completed" if ok else "failed"
        if name in self.running_steps:
            self.running_steps.discard(name)
            if self.step is not None and self.step.name == name and self.step.state == "running":
                self.step.state = outcome
            return
        if self.steps_kept < steps_cap:  # completed without a start: the store adds it
            self.steps_kept += 1
            self.step = StepSeen(name, name, outcome)

    # -- what it shows --

    @property
    def status(self) -> TaskStatus:
        if self.state == "cancelled":
            return "cancelled"
        if self.state in FINAL:
            return "completed"
        return "working"

    @property
    def final(self) -> bool:
        return self.state in FINAL

    @property
    def status_message(self) -> str:
        if self.state == "queued":
            return "queued"
        if self.state == "succeeded":
            return "succeeded"
        if self.state == "failed":
            error = self.error
            return f"failed: {error.code}: {error.message}" if error is not None else "failed"
        if self.state == "cancelled":
            return "cancelled"
        parts = [progress_text(self.progress)] if self.progress is not None else []
        if self.step is not None:
            shown = {"running": "running", "completed": "done", "failed": "failed"}
            parts.append(f"{self.step.title} ({shown[self.step.state]})")
        if self.state == "cancelling":
            parts.insert(0, "cancelling")
        return "; ".join(parts) or self.state

    @property
    def shown(self) -> tuple[str, str]:
        """What a subscriber is told again when it changes."""
        return self.status, self.status_message

    def ttl_ms(self, keep_ms: int) -> int:
        end = epoch_ms(self.finished_at) if self.finished_at else now_stamp()[1]
        return max(0, end - self.created_ms) + keep_ms


# -- the task book ----------------------------------------------------------------------------


class TaskBook:
    """Tasks over one engine: opened, found for their owner, rendered for either era."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.store = TaskStore(engine.redis, settings)
        self.keep_ms = int(settings.retain_seconds * 1000)
        self.steps_cap = LIMITS.steps

    async def open(self, snap: ExecutionSnapshot, owner: str, tool: str) -> TaskState:
        """Make the execution just started a task of `owner`'s; written before it is
        answered, so its id resolves on every replica from then on."""
        task_id, hashed = mint_task_id(snap.id)
        record = TaskRecord(hashed, owner, tool, epoch_ms(snap.created_at))
        await self.store.create(snap.id, record)
        return TaskState.of(task_id, record, snap, None)

    async def find(self, task_id: str, owner: str) -> TaskState:
        """The task `task_id` of `owner`, or `task_not_found` (unknown, gone, or another's)."""
        found = (await self.find_many([task_id], owner))[0]
        if found is None:
            raise task_not_found()
        return found

    async def find_many(self, task_ids: Sequence[str], owner: str) -> list[TaskState | None]:
        parsed = [parse_task_id(t) for t in task_ids]
        wanted = [p[0] for p in parsed if p is not None]
        reads = iter(await self.store.read_many(wanted))
        found: list[TaskState | None] = []
        for task_id, ids in zip(task_ids, parsed, strict=True):
            read = next(reads) if ids is not None else None
            state = self._state_of(task_id, ids, read, owner)
            if state is not None and state.state == "failed" and state.retried_as:
                state = await self.follow_chain(state)
            found.append(state)
        return found

    def _state_of(
        self, task_id: str, ids: tuple[str, str] | None, read: TaskRead | None, owner: str
    ) -> TaskState | None:
        if ids is None or read is None or read.record is None or read.snapshot is None:
            return None
        record = read.record
        if not hmac.compare_digest(record.secret_hash, secret_hash(ids[1])):
            return None
        if not hmac.compare_digest(record.owner, owner):
            return None
        snap = self.engine.snapshot_from(read.snapshot)
        return TaskState.of(task_id, record, snap, read.last_event)

    async def listed(self, owner: str, count: int) -> list[ListedTask]:
        """`owner`'s newest `count` tasks that still exist, newest first, each as it stands
        (a retried one as its last attempt)."""
        ids = await self.store.owned(owner, count)
        listed: list[ListedTask] = []
        for read in await self.store.read_many(ids):
            record = read.record
            if record is None or read.snapshot is None:
                continue  # forgotten past the retention, or its record never written
            if not hmac.compare_digest(record.owner, owner):
                continue
            snap = self.engine.snapshot_from(read.snapshot)
            state = TaskState.of("", record, snap, read.last_event)
            if state.state == "failed" and state.retried_as:
                state = await self.follow_chain(state)
            listed.append(
                ListedTask(
                    execution_id=state.execution_id,
                    tool=state.tool,
                    status=state.status,
                    status_message=state.status_message,
                    created_at=state.created_at,
                    last_updated_at=state.updated_at,
                    ttl_ms=state.ttl_ms(self.keep_ms),
                    resource=f"majordomus://executions/{state.execution_id}",
                    links=msgspec.to_builtins(self.engine.links(state.execution_id)),
                )
            )
        return listed

    async def reread(self, state: TaskState) -> TaskState:
        """The task read again from Redis (a subscriber that fell behind the feed)."""
        snapshot, last = await self.store.snapshot_and_last_event(state.execution_id)
        if snapshot is None:
            return state
        fresh = self._restate(state, self.engine.snapshot_from(snapshot), last)
        if fresh.state == "failed" and fresh.retried_as:
            fresh = await self.follow_chain(fresh)
        return fresh

    async def follow_chain(self, state: TaskState) -> TaskState:
        """A failed attempt that was retried: the task goes on as its last attempt."""
        hops = 0
        while state.state == "failed" and state.retried_as and hops < MAX_ATTEMPTS:
            hops += 1
            snapshot, last = await self.store.snapshot_and_last_event(state.retried_as)
            if snapshot is None:  # the next attempt is gone (pruned): this one's end stands
                break
            state = self._restate(state, self.engine.snapshot_from(snapshot), last)
        return state

    def _restate(
        self, state: TaskState, snap: ExecutionSnapshot, last_event: bytes | None
    ) -> TaskState:
        record = TaskRecord("", "", state.tool, state.created_ms)
        return TaskState.of(state.task_id, record, snap, last_event)

    # -- rendering --

    def execution_meta(self, state: TaskState) -> dict[str, Any]:
        links = self.engine.links(state.execution_id)
        return {
            "majordomus": {
                "execution": {
                    "id": state.execution_id,
                    "capability": state.capability,
                    "links": msgspec.to_builtins(links),
                }
            }
        }

    def tool_result(self, state: TaskState) -> types.CallToolResult:
        """What the tool call would have answered directly: its output, or its failure."""
        meta = self.execution_meta(state)["majordomus"]
        if state.state == "succeeded":
            result = ok_result(state.output)
            result.meta = {"majordomus": meta}
            return result
        return error_result(self.failure_of(state), **meta)

    def failure_of(self, state: TaskState) -> MajordomusError:
        """The error of a task whose execution ended badly (as `Engine.call` raises it)."""
        error = state.error
        code: Any = error.code if error is not None and error.code in HTTP_STATUS else "internal"
        if error is None and state.state == "cancelled":
            code = "cancelled"
        message = error.message if error is not None else f"the execution ended {state.state}"
        links = self.engine.links(state.execution_id)
        return MajordomusError(
            code,
            f"{state.capability} ran as {state.execution_id}, which {state.state}: {message}",
            (error.suggestion if error is not None else None)
            or f"read its events: GET {links.events}",
            state.execution_id,
        )

    def body(self, state: TaskState, result_type: str | None = "complete") -> dict[str, Any]:
        """The task as the extension carries it: `CreateTaskResult` (`result_type="task"`),
        `tasks/get` (`"complete"`), or a notification's params (None)."""
        result: dict[str, Any] | UnsetType = UNSET
        if state.status == "completed":
            result = self.tool_result(state).model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
        body = TaskBody(
            task_id=state.task_id,
            status=state.status,
            status_message=state.status_message,
            created_at=state.created_at,
            last_updated_at=state.updated_at,
            ttl_ms=state.ttl_ms(self.keep_ms),
            poll_interval_ms=POLL_INTERVAL_MS,
            result=result,
            result_type=result_type if result_type is not None else UNSET,
            meta=self.execution_meta(state),
        )
        return msgspec.to_builtins(body)  # type: ignore[no-any-return]

    def legacy_body(self, state: TaskState) -> dict[str, Any]:
        """The task in the 2025-11-25 shape (`Task`)."""
        body = LegacyTaskBody(
            task_id=state.task_id,
            status=state.status,
            status_message=state.status_message,
            created_at=state.created_at,
            last_updated_at=state.updated_at,
            ttl=state.ttl_ms(self.keep_ms),
            poll_interval=POLL_INTERVAL_MS,
        )
        return msgspec.to_builtins(body)  # type: ignore[no-any-return]


# -- the extension ----------------------------------------------------------------------------

LegacyHandler = Callable[[ServerRequestContext[Any, Any], TaskIdParams], Awaitable[HandlerResult]]


class TasksExtension(Extension):
    """The tasks extension on the official SDK's extension API: `tasks/get`, `tasks/update`,
    `tasks/cancel`, and the `tools/call` interceptor that answers a task when it may.

    `tasks/get` and `tasks/cancel` are also the 2025-11-25 methods of the same name: a
    handshake-era request is answered in that era's shape by `legacy` (`api.mcp.tasks_2025`).
    """

    identifier = EXTENSION

    def __init__(
        self,
        engine: Engine,
        book: TaskBook,
        held: HeldEpisodes,
        capabilities: Mapping[str, Capability],
    ) -> None:
        self.engine = engine
        self.book = book
        self.held = held
        self.capabilities = capabilities
        self.legacy_get: LegacyHandler | None = None
        self.legacy_cancel: LegacyHandler | None = None

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
            MethodBinding(
                "tasks/update",
                UpdateTaskParams,
                self.update,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )

    def owner(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return owner_of(ctx, self.held.binding_for(ctx))

    # -- tools/call --

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        cap = self.capabilities.get(params.name)
        if cap is None or not is_modern(ctx):
            return await call_next(ctx)
        support = task_support_of(cap)
        if support == "forbidden":
            return await call_next(ctx)
        if not declared_extension(ctx):
            if support == "required":
                raise missing_extension()
            return await call_next(ctx)
        started = await self.start(ctx, cap, params.arguments)
        if isinstance(started, types.CallToolResult):
            return started
        return self.book.body(started, result_type="task")

    async def start(
        self, ctx: ServerRequestContext[Any, Any], cap: Capability, arguments: Any
    ) -> TaskState | types.CallToolResult:
        """Start the execution and make it a task of the caller's; or the refusal as a tool
        result (an input the capability refuses starts nothing: there is no task to poll)."""
        binding = self.held.binding_for(ctx)
        episode = binding.episode
        try:
            snap = await self.engine.start(
                cap.id, arguments if arguments is not None else {}, actor="mcp", episode=episode
            )
            if isinstance(snap.episode, str):
                await self.held.episodes.note_execution(snap.episode, snap.id)
            return await self.book.open(snap, owner_of(ctx, binding), cap.exposure.mcp_tool or "")
        except Exception as exc:  # noqa: BLE001  every failure is a result, never a traceback
            err, _ = classify(exc, "MCP", cap.exposure.mcp_tool or cap.id)
            return error_result(err)

    # -- the methods --

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        if not is_modern(ctx) and self.legacy_get is not None:
            return await self.legacy_get(ctx, params)
        self._admit(ctx, params.task_id)
        state = await self.book.find(params.task_id, self.owner(ctx))
        return self.book.body(state)

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        """A majordomus task never asks for input, so no response is outstanding: the
        answers are ignored (as the extension says of unknown keys) and acknowledged."""
        self._admit(ctx, params.task_id)
        await self.book.find(params.task_id, self.owner(ctx))
        return {}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        """Ask the execution to stop (SPEC 3: a queued one is cancelled at once, a running
        one within 100 ms of its handler's next look); acknowledged at once, eventually
        consistent as the extension allows."""
        if not is_modern(ctx) and self.legacy_cancel is not None:
            return await self.legacy_cancel(ctx, params)
        self._admit(ctx, params.task_id)
        state = await self.book.find(params.task_id, self.owner(ctx))
        await self.stop(state)
        return {}

    async def stop(self, state: TaskState) -> None:
        if state.final:
            return
        try:
            await self.engine.cancel(state.execution_id, by="mcp")
        except MajordomusError as exc:
            if exc.code != "not_found":
                raise MCPError(types.INTERNAL_ERROR, f"{exc.code}: {exc.message}") from None

    def _admit(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
        if not declared_extension(ctx):
            raise missing_extension()
        check_routing_header(ctx, task_id)


def with_task_support(capabilities: Mapping[str, Capability]) -> ServerMiddleware[Any]:
    """Middleware: every tool of `tools/list` says its `execution.taskSupport`, in both eras.

    The 2025-11-25 `Tool` has the member, so the SDK serializes it as it is; the 2026-07-28
    wire schema dropped it with core tasks, so the SDK sieves it out, and this puts it back
    on the serialized answer (unknown members are ignored by clients that do not know it).
    """

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        for tool in result.get("tools", ()):
            cap = capabilities.get(tool.get("name", "")) if isinstance(tool, dict) else None
            if cap is not None:
                tool.setdefault("execution", {"taskSupport": task_support_of(cap)})
        return result

    return middleware
