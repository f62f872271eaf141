"""The MCP server: the registry as MCP tools and resources, over one engine.

Every capability with an MCP tool name is a tool whose description and input and output
schemas are the capability's own; a call is validated by the capability's msgspec type and
dispatched through `Engine.invoke` as actor `mcp`. A result carries `structuredContent` and
the same JSON as a text block; a failure is a result with `isError: true`, the text
`"<code>: <message>"` and `_meta.majordomus.error` (an unexpected exception is `internal`
with a correlation id, its traceback only in this process's log). An unknown tool is a
protocol error. A call that runs an execution, and `majordomus_execution_wait`, forward the
events they see as progress notifications when the caller sent a `progressToken`, their
value growing with each (`ProgressForwarder`); cancelling the call, or the client going
away, ends the call and never the execution. Neither holds a call past `mcp_call_seconds`
(50 s, under the 60 s request timeout of common clients): an execution still going then is
answered as such, with its id and how to follow it (`still_running`).

This module serves; it does not bind episodes to connections (`api.mcp.episodes`), nor
choose a transport (`api.mcp.mount` for Streamable HTTP, `api.mcp.stdio`).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from typing import Any
from urllib.parse import unquote

import anyio
import msgspec
from mcp import MCPError, types
from mcp.server import Server, ServerRequestContext

import majordomus
from majordomus.api.errors import classify
from majordomus.api.live import FeedHub
from majordomus.api.mcp.episodes import HeldEpisodes
from majordomus.api.mcp.results import error_result, ok_result, still_running
from majordomus.api.mcp.sdk import install_extension
from majordomus.api.mcp.task_listen import TaskListen, TaskListenParams
from majordomus.api.mcp.tasks import TaskBook, TasksExtension, task_support_of, with_task_support
from majordomus.api.mcp.tasks_2025 import Tasks2025
from majordomus.config import Settings
from majordomus.context import Context
from majordomus.engine import Engine
from majordomus.model import ExecutionEvent, ExecutionProgress, ExecutionSnapshot, describe_event
from majordomus.registry import Capability

log = logging.getLogger("majordomus.mcp")

START = "executions.start"

RESOURCE_LIST = "majordomus://executions"
RESOURCE_PROTOCOL = "majordomus://executions/protocol"
RESOURCE_EXECUTION = "majordomus://executions/{id}"
RESOURCE_TASKS = "majordomus://tasks"
RESOURCE_EPISODE_TASKS = "majordomus://episodes/{episode}/tasks"
TASKS_LISTED = 100
"""Tasks a listing shows: the newest."""
JSON = "application/json"

INSTRUCTIONS = (
    "majordomus runs capabilities as executions anyone can watch. Start one with "
    "majordomus_execution_start (it answers at once with the queued execution), follow it "
    "with majordomus_execution_wait (progress notifications if you send a progressToken) or "
    "page its events with majordomus_execution_events, and stop it with "
    "majordomus_execution_cancel. A tool call whose execution is still running when the "
    "call's wait ends answers so (unavailable, not failed) with the execution's id: follow "
    "it with majordomus_execution_wait rather than calling the tool again. To group your "
    "work, call majordomus_session_attach with your own durable conversation or thread id: "
    "the executions you start then carry it, "
    "and coming back under the same id resumes it. Without a session, send that id as "
    "_meta 'majordomus/episode' on your requests. A client of the MCP tasks extension "
    "(io.modelcontextprotocol/tasks) gets a task for any tool whose execution.taskSupport "
    "allows one: poll it with tasks/get or follow it with subscriptions/listen taskIds."
)


def episode_tasks_of(uri: str) -> str | None:
    """The episode a `majordomus://episodes/{episode}/tasks` URI names, or None."""
    head, tail = "majordomus://episodes/", "/tasks"
    if not (uri.startswith(head) and uri.endswith(tail)) or len(uri) <= len(head) + len(tail):
        return None
    return unquote(uri[len(head) : -len(tail)])


def replica_id() -> str:
    """This process among the API replicas: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class ProgressForwarder:
    """Forwards the events a waiting tool sees as progress notifications of its call.

    MCP asks a call's progress to grow with every notification, while most of an
    execution's events leave its progress where it was (a step, a log line) and a retried
    attempt starts it over. So a progress report that grows past everything sent is sent
    as it is, with its total: the fraction a client shows stays the execution's own. Any
    other event (a step, a log line, a report that went back, the end) is sent with its
    message a little past the highest report: the k-th since it at `reached + k/(k+1)`,
    below the next whole report (a report is an integer). A value past the total is sent
    without it (a total is only ever the execution's, and never below the value), and one
    that could not grow (floats run out after millions of events between two reports) is
    not sent: its event stays in the execution's history. Nothing is sent when the
    caller sent no `progressToken`, and a notification that cannot be delivered
    (the client went away) is dropped: the call ends by its own cancellation, never by a
    failed notification.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self.session = ctx.session
        self.reached = 0.0
        """The highest progress the execution reported (0 before any)."""
        self.total: float | None = None
        """The total of its latest report that gave one."""
        self.since = 0
        """Events seen since `reached` last grew."""
        self.sent: float | None = None
        """The last value sent; every next one is greater."""

    def next_value(self, event: ExecutionEvent) -> float | None:
        """The value to send for `event`, greater than the last one sent; None: send none."""
        if isinstance(event, ExecutionProgress):
            if event.data.total is not None:
                self.total = float(event.data.total)
            current = float(event.data.current)
            if self.sent is None or current > self.sent:
                self.reached, self.since = current, 0
                return current
        if self.sent is None:
            return self.reached
        self.since += 1
        value = self.reached + self.since / (self.since + 1)
        return value if value > self.sent else None

    async def __call__(self, event: ExecutionEvent) -> None:
        value = self.next_value(event)
        if value is None:
            return
        self.sent = value
        total = self.total if self.total is not None and value <= self.total else None
        try:
            await self.session.report_progress(value, total, describe_event(event))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("progress notification dropped: the client's stream is gone")


# -- the server -------------------------------------------------------------------------------


class McpSurface:
    """The low-level MCP server over one engine, and the episodes this replica holds."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        stdio: bool = False,
        hub: FeedHub | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.held = HeldEpisodes(engine, settings, replica_id(), stdio=stdio)
        self.capabilities: dict[str, Capability] = {}
        self.tools: dict[str, types.Tool] = {}
        for cap in engine.registry:
            name = cap.exposure.mcp_tool
            if not name:
                continue
            self.capabilities[name] = cap
            self.tools[name] = types.Tool(
                name=name,
                title=cap.title,
                description=cap.description,
                input_schema=cap.input_schema,
                output_schema=cap.output_schema,
                annotations=types.ToolAnnotations(read_only_hint=cap.kind == "query"),
                execution=types.ToolExecution(task_support=task_support_of(cap)),
            )
        self.server: Server[Any] = Server(
            "majordomus",
            version=majordomus.__version__,
            title="majordomus",
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            get_tool_input_schema=self.input_schema_of,
        )
        self.server.middleware.append(self.held.renew_episode)
        # Tasks (`api.mcp.tasks`): the extension's methods and its tools/call interceptor,
        # the listen stream that pushes their status, and taskSupport on every tool.
        self.book = TaskBook(engine, settings)
        self.tasks = TasksExtension(engine, self.book, self.held, self.capabilities)
        install_extension(self.server, self.tasks, self.call_tool)
        self.listen = TaskListen(self.book, self.tasks.owner)
        self.listen.hub = hub
        self.server.add_request_handler("subscriptions/listen", TaskListenParams, self.listen)
        self.server.middleware.append(with_task_support(self.capabilities))
        self.tasks_2025 = Tasks2025(self.tasks)
        self.tasks_2025.hub = hub
        self.tasks_2025.install(self.server)

    # -- tools ----------------------------------------------------------------------------

    def input_schema_of(self, name: str) -> dict[str, Any] | None:
        tool = self.tools.get(name)
        return tool.input_schema if tool is not None else None

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        cap = self.capabilities.get(params.name)
        if cap is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        binding = self.held.binding_for(ctx)
        args: Any = params.arguments if params.arguments is not None else {}
        # Answer before the client's own request timeout (60 s in the common ones) would
        # cut the call: an execution still going is answered as such, with its id.
        bound_ms = int(self.settings.mcp_call_seconds * 1000)
        try:
            if cap.id == START:
                await self.held.renew_start_handle(binding, args)
            episode = binding.episode
            call_ctx = Context(
                self.engine,
                actor="mcp",
                episode=episode,
                on_progress=ProgressForwarder(ctx),
                connection=binding,
                wait_bound_ms=bound_ms,  # its `executions.wait` too
            )

            async def noted(started: ExecutionSnapshot) -> None:
                if isinstance(started.episode, str):
                    await self.held.episodes.note_execution(started.episode, started.id)

            called = await self.engine.call(
                cap.id,
                args,
                actor="mcp",
                episode=episode,
                ctx=call_ctx,
                wait_ms=bound_ms,
                on_event=call_ctx.on_progress,
                on_started=noted,
            )
            value = called.output
            if cap.id == START and isinstance(value.episode, str):
                await self.held.episodes.note_execution(value.episode, value.id)
        except Exception as exc:  # noqa: BLE001  every failure is a result, never a traceback
            err, _ = classify(exc, "MCP", params.name)
            return error_result(err)
        if called.pending:
            assert called.execution is not None
            return still_running(
                called.execution, self.engine.registry, self.settings.mcp_call_seconds
            )
        return ok_result(value)

    # -- resources --------------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=RESOURCE_LIST,
                    name="executions",
                    title="Executions",
                    description="Executions newest first, with the queue at a glance.",
                    mime_type=JSON,
                ),
                types.Resource(
                    uri=RESOURCE_TASKS,
                    name="tasks",
                    title="Your tasks",
                    description=(
                        "The MCP tasks you created (as your episode, or else your bearer "
                        "token), newest first: each one's execution and status."
                    ),
                    mime_type=JSON,
                ),
                types.Resource(
                    uri=RESOURCE_PROTOCOL,
                    name="protocol",
                    title="The live protocol",
                    description="The live channel's contract, its schemas and every limit.",
                    mime_type=JSON,
                ),
            ]
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=RESOURCE_EXECUTION,
                    name="execution",
                    title="One execution",
                    description="One execution's snapshot: state, progress, steps, output or error.",
                    mime_type=JSON,
                ),
                types.ResourceTemplate(
                    uri_template=RESOURCE_EPISODE_TASKS,
                    name="episode-tasks",
                    title="An episode's tasks",
                    description=(
                        "The MCP tasks an episode created, newest first; readable only as "
                        "that episode (its session, or `_meta` 'majordomus/episode')."
                    ),
                    mime_type=JSON,
                ),
            ]
        )

    async def tasks_listing(self, ctx: ServerRequestContext[Any, Any], uri: str) -> Any:
        """The caller's tasks; an episode's only to a caller acting as that episode (anyone
        else is told the resource does not exist, as a task is)."""
        owner = self.tasks.owner(ctx)
        named = episode_tasks_of(uri)
        if named is not None and owner != f"episode:{named}":
            raise MCPError(types.INVALID_PARAMS, "Resource not found", data={"uri": uri})
        return {"tasks": await self.book.listed(owner, TASKS_LISTED)}

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        prefix = RESOURCE_LIST + "/"
        try:
            if uri == RESOURCE_LIST:
                value: Any = await self.engine.list()
            elif uri == RESOURCE_PROTOCOL:
                value = self.engine.protocol()
            elif uri == RESOURCE_TASKS or episode_tasks_of(uri) is not None:
                value = await self.tasks_listing(ctx, uri)
            elif uri.startswith(prefix) and uri != prefix:
                value = await self.engine.get(uri[len(prefix) :])
            else:
                raise MCPError(types.INVALID_PARAMS, "Resource not found", data={"uri": uri})
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001
            err, _ = classify(exc, "MCP", uri)
            code = (
                types.INTERNAL_ERROR
                if err.code in ("internal", "unavailable")
                else types.INVALID_PARAMS
            )
            raise MCPError(
                code, f"{err.code}: {err.message}", data={"uri": uri, "code": err.code}
            ) from None
        text = msgspec.json.encode(value).decode()
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=JSON, text=text)]
        )
