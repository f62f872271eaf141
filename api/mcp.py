"""The MCP surface: the registry as MCP tools and resources, over Streamable HTTP and stdio.

Every capability with an MCP tool name is a tool whose description and input and output
schemas are the capability's own; a call is validated by the capability's msgspec type and
dispatched through `Engine.invoke` as actor `mcp`. A result carries `structuredContent` and
the same JSON as a text block; a failure is a result with `isError: true`, the text
`"<code>: <message>"` and `_meta.majordomus.error` (an unexpected exception is `internal`
with a correlation id, its traceback only in this process's log). An unknown tool is a
protocol error. `majordomus_execution_wait` forwards the events it sees as progress
notifications when the caller sent a `progressToken`; cancelling the call, or the client
going away, ends the call and never the execution.

Both protocol eras share one endpoint. A 2025 client (the `initialize` handshake) gets a
session: its episode is bound to it, every message renews the episode's lease, this
replica renews it while the session lives, and the session's end (DELETE, idle timeout,
transport loss) detaches it. Those sessions live in this process's memory, so a replica
set serving 2025 clients needs sticky routing. A 2026-07-28 request is self-contained: its
episode is named by the handle it carries (`_meta["majordomus/episode"]`, or the `episode`
argument of `majordomus_execution_start`), everything about it is in Redis, and any
replica answers it.

Host and Origin are checked as the MCP specification asks (a DNS-rebinding defence): the
loopback names on any port are allowed, and whatever `hosts` the server is reached at.

This module does not own the HTTP app: the API mounts `McpMount.asgi` at `/mcp` and runs
`McpMount.lifespan()` in its own lifespan. Nor does it know what episodes are beyond
handing their handlers the caller's connection (`majordomus.episodes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from mcp import MCPError, types
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

import majordomus
from api.errors import classify
from majordomus.config import Settings
from majordomus.context import Context
from majordomus.engine import Engine
from majordomus.episodes import HolderKind, hold_seconds
from majordomus.errors import MajordomusError
from majordomus.loading import load_capabilities
from majordomus.model import (
    ExecutionCancelled,
    ExecutionCancelling,
    ExecutionCompleted,
    ExecutionDiagnosticEvent,
    ExecutionEvent,
    ExecutionFailed,
    ExecutionLog,
    ExecutionProgress,
    ExecutionStarted,
    ExecutionStepCompleted,
    ExecutionStepStarted,
)
from majordomus.registry import Capability
from majordomus.store.connect import connect
from majordomus.store.episodes import EpisodeStore

log = logging.getLogger("majordomus.mcp")

EPISODE_META = "majordomus/episode"
"""The `_meta` key a 2026-07-28 client names its episode with."""

START = "executions.start"

RESOURCE_LIST = "majordomus://executions"
RESOURCE_PROTOCOL = "majordomus://executions/protocol"
RESOURCE_EXECUTION = "majordomus://executions/{id}"
JSON = "application/json"

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

REMEMBERED_HANDLES = 10_000
"""2026-07-28 handles this replica remembers renewing, to detach them when it stops."""

SHUTDOWN_SECONDS = 5.0
"""How long a stopping replica spends detaching the episodes it held."""

INSTRUCTIONS = (
    "majordomus runs capabilities as executions anyone can watch. Start one with "
    "majordomus_execution_start (it answers at once with the queued execution), follow it "
    "with majordomus_execution_wait (progress notifications if you send a progressToken) or "
    "page its events with majordomus_execution_events, and stop it with "
    "majordomus_execution_cancel. To group your work, call majordomus_session_attach with "
    "your own durable conversation or thread id: the executions you start then carry it, "
    "and coming back under the same id resumes it. Without a session, send that id as "
    "_meta 'majordomus/episode' on your requests."
)

_STATE_EPISODE = "majordomus.episode"
_STATE_HOLDER = "majordomus.holder"
_STATE_RENEWED = "majordomus.renewed_at"
_STATE_WATCHED = "majordomus.watched"


def replica_id() -> str:
    """This process among the API replicas: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


def transport_security(hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """The Host and Origin checks: loopback on any port, plus the hosts the server is reached at.

    `hosts` are `host:port` as clients write them in the URL (e.g. `api.internal:8000`); the
    same hosts are allowed as `http://` and `https://` origins. A request without `Origin`
    (every non-browser client) passes the origin check.
    """
    allowed = [*LOOPBACK_HOSTS, *(f"{h}:*" for h in LOOPBACK_HOSTS), *hosts]
    origins = [f"{scheme}://{h}" for scheme in ("http", "https") for h in allowed]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed, allowed_origins=origins
    )


# -- results --------------------------------------------------------------------------------


def ok_result(value: Any) -> types.CallToolResult:
    """A tool's answer: the structured value, and the same JSON as a text block."""
    return types.CallToolResult(
        content=[types.TextContent(text=msgspec.json.encode(value).decode())],
        structured_content=msgspec.to_builtins(value),
    )


def error_result(err: MajordomusError) -> types.CallToolResult:
    """A failure as a tool result the model can read and a program can branch on."""
    return types.CallToolResult(
        content=[types.TextContent(text=f"{err.code}: {err.message}")],
        is_error=True,
        _meta={"majordomus": {"error": {"code": err.code, "suggestion": err.suggestion}}},
    )


def describe(event: ExecutionEvent) -> str:
    """An event as the one line a progress notification carries."""
    if isinstance(event, ExecutionProgress):
        p = event.data
        amount = f"{p.current}/{p.total}" if p.total is not None else str(p.current)
        return f"{amount} {p.message}" if p.message else amount
    if isinstance(event, ExecutionStarted):
        return "running"
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
    return str(event.__struct_config__.tag)


class ProgressForwarder:
    """Forwards the events a waiting tool sees as progress notifications of its call.

    A progress event gives `progress`/`total`/`message`; any other event gives a message
    and repeats the last progress and total (the fraction a client shows stays the
    execution's own). Nothing is sent when the caller sent no `progressToken`, and a
    notification that cannot be delivered (the client went away) is dropped: the call
    ends by its own cancellation, never by a failed notification.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self.session = ctx.session
        self.progress = 0.0
        self.total: float | None = None

    async def __call__(self, event: ExecutionEvent) -> None:
        if isinstance(event, ExecutionProgress):
            self.progress = float(event.data.current)
            if event.data.total is not None:
                self.total = float(event.data.total)
        try:
            await self.session.report_progress(self.progress, self.total, describe(event))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("progress notification dropped: the client's stream is gone")


# -- connections and episodes -----------------------------------------------------------------


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The SDK's per-connection state; mcp 2.3 offers no public accessor (pinned <2.4)."""
    return ctx.session._connection  # noqa: SLF001


class McpConnection:
    """The caller's MCP connection as the episodes handlers see it (`EpisodeConnection`).

    A `session` (a 2025 client over HTTP, or stdio) lasts across requests: the episode it
    holds is kept in the SDK connection's own state. A `handle` (a 2026-07-28 request) is
    bound only by the episode handle it carries.
    """

    def __init__(
        self,
        surface: McpSurface,
        conn: Connection | None,
        kind: HolderKind,
        holder: str,
        handle: str | None = None,
    ) -> None:
        self.surface = surface
        self.conn = conn
        self.kind: HolderKind = kind
        self.holder = holder
        self.handle = handle

    @property
    def episode(self) -> str | None:
        if self.conn is not None:
            held = self.conn.state.get(_STATE_EPISODE)
            return str(held) if held is not None else None
        return self.handle

    def bind(self, external_id: str) -> None:
        if self.conn is None:
            self.handle = external_id
            self.surface.remember_handle(external_id)
            return
        self.conn.state[_STATE_EPISODE] = external_id
        self.conn.state[_STATE_RENEWED] = time.monotonic()
        self.surface.sessions[self.holder] = self.conn
        if not self.conn.state.get(_STATE_WATCHED):
            # Once per connection: its end (DELETE, idle timeout, lost transport, EOF on
            # stdio, shutdown) detaches whatever it holds then.
            self.conn.state[_STATE_WATCHED] = True
            self.conn.exit_stack.push_async_callback(self.surface.session_ended, self.conn)

    def release(self) -> None:
        if self.conn is not None:
            self.conn.state.pop(_STATE_EPISODE, None)
            self.surface.sessions.pop(self.holder, None)
        self.handle = None


_binding: contextvars.ContextVar[McpConnection | None] = contextvars.ContextVar(
    "majordomus_mcp_binding", default=None
)


# -- the server -------------------------------------------------------------------------------


class McpSurface:
    """The low-level MCP server over one engine, and the episodes this replica holds."""

    def __init__(self, engine: Engine, settings: Settings, *, stdio: bool = False) -> None:
        self.engine = engine
        self.settings = settings
        self.stdio = stdio
        self.replica = replica_id()
        self.episodes: EpisodeStore = engine.episodes
        self.sessions: dict[str, Connection] = {}
        """Sessions of this replica holding an episode, by holder: renewed while they live."""
        self.handles: OrderedDict[str, None] = OrderedDict()
        self.handle_holder = f"{self.replica} handle"
        self.connected: Callable[[Connection], bool] = lambda conn: True
        """Whether a session's client is connected now (stdio: while the process serves)."""
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
        self.server.middleware.append(self.renew_episode)

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
        binding = _binding.get() or self.binding_of(ctx)
        args: Any = params.arguments if params.arguments is not None else {}
        try:
            if cap.id == START:
                await self.renew_start_handle(binding, args)
            episode = binding.episode
            call_ctx = Context(
                self.engine,
                actor="mcp",
                episode=episode,
                on_progress=ProgressForwarder(ctx),
                connection=binding,
            )
            value = await self.engine.invoke(
                cap.id, args, actor="mcp", episode=episode, ctx=call_ctx
            )
            if cap.id == START and isinstance(value.episode, str):
                await self.episodes.note_execution(value.episode, value.id)
        except Exception as exc:  # noqa: BLE001  every failure is a result, never a traceback
            err, _ = classify(exc, "MCP", params.name)
            return error_result(err)
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
                )
            ]
        )

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

    # -- episodes -----------------------------------------------------------------------------

    def binding_of(self, ctx: ServerRequestContext[Any, Any]) -> McpConnection:
        """The caller's connection: a lasting session, or a self-contained 2026-07-28 request.

        A session's episode is the one bound to it by attach; a `_meta` handle counts only
        where there is no session to bind to.
        """
        conn = connection_of(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if not modern and (self.stdio or conn.session_id is not None):
            holder = conn.state.get(_STATE_HOLDER)
            if holder is None:
                where = "stdio" if conn.session_id is None else f"session {conn.session_id}"
                holder = conn.state[_STATE_HOLDER] = f"{self.replica} {where}"
            return McpConnection(self, conn, "session", holder)
        meta = ctx.meta or {}
        handle = meta.get(EPISODE_META)  # type: ignore[misc]
        handle = handle if isinstance(handle, str) and handle else None
        return McpConnection(self, None, "handle", self.handle_holder, handle)

    async def renew_episode(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Middleware: every message renews the episode its connection holds or names."""
        binding = self.binding_of(ctx)
        try:
            await self.renew(binding)
        except Exception:  # noqa: BLE001  a renewal never fails the request it rides on
            log.warning("renewing an episode failed", exc_info=True)
        token = _binding.set(binding)
        try:
            return await call_next(ctx)
        finally:
            _binding.reset(token)

    async def renew(self, binding: McpConnection) -> None:
        conn = binding.conn
        held = conn.state.get(_STATE_EPISODE) if conn is not None else None
        if conn is not None and held is not None:
            # A session is renewed by this replica while it lives, so a message need only
            # renew when the last renewal is a while back.
            now = time.monotonic()
            if now - conn.state.get(_STATE_RENEWED, 0.0) < hold_seconds(self.settings) / 4:
                return
            conn.state[_STATE_RENEWED] = now
            if not await self.episodes.renew(held, binding.holder, "session"):
                binding.release()  # closed, or resumed by another connection since
            return
        if binding.handle is not None:
            await self.renew_handle(binding, binding.handle)

    async def renew_handle(self, binding: McpConnection, handle: str) -> None:
        if await self.episodes.renew(handle, self.handle_holder, "handle"):
            self.remember_handle(handle)
        elif binding.handle == handle:
            binding.handle = None  # an unknown or closed episode: executions do not carry it

    async def renew_start_handle(self, binding: McpConnection, args: Any) -> None:
        named = args.get("episode") if isinstance(args, dict) else None
        if isinstance(named, str) and named and named != binding.episode:
            if await self.episodes.renew(named, self.handle_holder, "handle"):
                self.remember_handle(named)

    def remember_handle(self, handle: str) -> None:
        self.handles[handle] = None
        self.handles.move_to_end(handle)
        while len(self.handles) > REMEMBERED_HANDLES:
            self.handles.popitem(last=False)

    async def session_ended(self, conn: Connection) -> None:
        """A session ended: the episode it held is detached (not closed)."""
        held = conn.state.pop(_STATE_EPISODE, None)
        holder = conn.state.get(_STATE_HOLDER)
        if holder is not None:
            self.sessions.pop(holder, None)
        if held is None or holder is None:
            return
        try:
            if await self.episodes.release(held, holder):
                log.info("episode %r detached: its MCP session ended", held)
        except Exception:  # noqa: BLE001
            log.warning("detaching episode %r failed", held, exc_info=True)

    async def heartbeat(self) -> None:
        """Renew the episodes of this replica's connected sessions; forget those taken.

        A session counts as connected while a request of it is in flight or its GET stream
        is open, the SDK's own measure of idleness. A session whose client vanished without
        a DELETE stays in memory until the SDK's idle timeout, but it stops being renewed
        here, so its episode detaches after `hold_seconds` like any other silent holder.
        """
        now = time.monotonic()
        held: list[tuple[str, str]] = []
        for holder, conn in list(self.sessions.items()):
            episode = conn.state.get(_STATE_EPISODE)
            if episode is not None and self.connected(conn):
                held.append((str(episode), holder))
                conn.state[_STATE_RENEWED] = now
        renewed = await self.episodes.keep_held(held)
        for (_, holder), ok in zip(held, renewed, strict=True):
            taken = self.sessions.get(holder) if not ok else None
            if taken is not None:  # closed, or resumed by another connection since
                taken.state.pop(_STATE_EPISODE, None)
                self.sessions.pop(holder, None)

    async def release_all(self) -> None:
        """Detach every episode this replica holds (it is stopping)."""
        for holder, conn in list(self.sessions.items()):
            held = conn.state.get(_STATE_EPISODE)
            if held is not None and await self.episodes.release(str(held), holder):
                log.info("episode %r detached: this replica is stopping", held)
        for handle in list(self.handles):
            if await self.episodes.release(handle, self.handle_holder):
                log.info("episode %r detached: this replica is stopping", handle)

    async def keep_episodes(self) -> None:
        """Until cancelled: renew live sessions' episodes and reap abandoned ones."""
        interval = min(1.0, hold_seconds(self.settings) / 3)
        while True:
            try:
                await self.heartbeat()
                await self.episodes.reap()
            except Exception:  # noqa: BLE001
                log.warning("keeping episodes failed; trying again", exc_info=True)
            await asyncio.sleep(interval)

    @contextlib.asynccontextmanager
    async def maintained(self) -> AsyncIterator[None]:
        """Run the episode keeper; on the way out, detach what this replica held."""
        keeper = asyncio.create_task(self.keep_episodes(), name="majordomus-episodes")
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            with anyio.move_on_after(SHUTDOWN_SECONDS, shield=True):
                try:
                    await self.release_all()
                except Exception:  # noqa: BLE001
                    log.warning("detaching held episodes failed", exc_info=True)


# -- mounting ---------------------------------------------------------------------------------


@dataclass
class McpMount:
    """What the API mounts: the Streamable HTTP ASGI app and the lifespan it needs run."""

    surface: McpSurface
    manager: StreamableHTTPSessionManager
    asgi: StreamableHTTPASGIApp = field(init=False)

    def __post_init__(self) -> None:
        self.asgi = StreamableHTTPASGIApp(self.manager)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """The session manager and the episode keeper, for the host app's lifespan.

        Enter it once (the SDK's session manager runs only once). On exit the episodes this
        replica held are detached, then the sessions are closed.
        """
        async with self.manager.run(), self.surface.maintained():
            yield


def build_mcp(engine: Engine, settings: Settings, *, hosts: Sequence[str] = ()) -> McpMount:
    """The MCP surface over `engine`, ready to mount at `/mcp`.

    `hosts`: the `host:port` names clients reach this server at besides loopback (the bound
    interface's name or address when it is not 127.0.0.1); any other Host is answered 421.
    """
    surface = McpSurface(engine, settings)
    manager = StreamableHTTPSessionManager(
        app=surface.server,
        json_response=False,
        stateless=False,
        security_settings=transport_security(hosts),
    )
    surface.connected = lambda conn: session_connected(manager, conn.session_id)
    return McpMount(surface, manager)


def session_connected(manager: StreamableHTTPSessionManager, session_id: str | None) -> bool:
    """Whether a 2025 session has a request in flight or its GET stream open right now.

    The SDK suspends a session's idle countdown exactly then (its `idle_scope` deadline is
    infinite); mcp 2.3 keeps the transports in a private map, hence this one helper.
    """
    transport = manager._server_instances.get(session_id or "")  # noqa: SLF001
    if transport is None or transport.is_terminated:
        return False
    idle = transport.idle_scope
    return idle is None or idle.deadline == math.inf


# -- stdio ------------------------------------------------------------------------------------


def run_stdio(settings: Settings) -> None:
    """`majordomus mcp`: serve the capabilities over stdio until the client closes it."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    anyio.run(serve_stdio, settings)


async def serve_stdio(settings: Settings) -> None:
    from mcp.server.stdio import stdio_server

    registry = load_capabilities(settings.capabilities)
    redis = connect(settings.redis_url)
    surface = McpSurface(Engine(redis, registry, settings), settings, stdio=True)
    try:
        async with surface.maintained(), stdio_server() as (read, write):
            await surface.server.run(read, write, surface.server.create_initialization_options())
    finally:
        await redis.aclose()


__all__ = ["McpMount", "McpSurface", "build_mcp", "run_stdio", "transport_security"]
