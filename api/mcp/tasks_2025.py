"""The same tasks in the shape of revision 2025-11-25 (SEP-1686), for handshake-era sessions.

A 2025 session learns of tasks from `initialize` (`capabilities.tasks`: list, cancel,
`requests.tools.call`) and from each tool's `execution.taskSupport`, and asks for one by
sending `params.task` (`{ttl?}`) on `tools/call`; it gets `CreateTaskResult` (`{task}`),
then `tasks/get` (a `Task`), `tasks/result` (the tool's result once the task ended, waited
for), `tasks/list` (this session's tasks, newest first), `tasks/cancel` (the `Task` after
the request) and `notifications/tasks/status` on the session's standalone stream whenever
its status or message changes. Every one is backed by the executions and records of the
2026 extension (`api.mcp.tasks`), so a task started in one era reads the same in the other,
and any replica reads it (the notifications come from the replica holding the session).

The SDK types this era's messages but dispatches none of them, and its result sieve holds a
2025 `tools/call` answer to `CallToolResult`: so a task-augmented `tools/call` is answered
by a server middleware (`answer`) before the sieve, and the other methods are custom
request methods, which the SDK serves unsieved. The requested `ttl` is not honoured: a
task is kept as long as every execution is (`ttl` in the answer says for how long).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp import MCPError, types
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import MethodBinding
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from majordomus.api.live import FeedHub
from majordomus.api.mcp.sdk import connection_of, version_gated
from majordomus.api.mcp.task_listen import IDLE_CHECK_SECONDS, TaskWatch
from majordomus.api.mcp.tasks import (
    TaskIdParams,
    TasksExtension,
    TaskState,
    is_modern,
    task_support_of,
)
from majordomus.loops import within

log = logging.getLogger("majordomus.mcp")

RELATED_TASK_META = "io.modelcontextprotocol/related-task"
"""The `_meta` key naming the task a message belongs to (2025-11-25)."""
SERVER_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
"""`capabilities.tasks` in this era's `initialize` answer."""
LISTED_TASKS = 1000
"""Tasks a session remembers for `tasks/list` (the newest); older ones stay readable."""
LIST_PAGE = 100
"""Tasks per `tasks/list` page."""
WATCHED_TASKS = 100
"""Tasks of one session whose status it is told of on its stream at once; one started while
that many are followed is not (it is polled, as every task can be)."""

_STATE_TASKS = "majordomus.tasks"
_STATE_WATCHES = "majordomus.task_watches"


def related(task_id: str) -> dict[str, Any]:
    return {RELATED_TASK_META: {"taskId": task_id}}


def in_era(result: types.CallToolResult, version: str) -> dict[str, Any]:
    """A tool result as this era's wire has it (what the SDK's sieve makes of a handler's)."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return methods.serialize_server_result("tools/call", version, dumped)


class Tasks2025:
    """The 2025-11-25 task methods and the middleware that answers task-augmented calls."""

    def __init__(self, tasks: TasksExtension) -> None:
        self.tasks = tasks
        self.book = tasks.book
        self.hub: FeedHub | None = None
        tasks.legacy_get = self.get
        tasks.legacy_cancel = self.cancel

    def install(self, server: Server[Any]) -> None:
        """`tasks/result` and `tasks/list` (this era's own), and the middleware."""
        handshake = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
        for method in (
            MethodBinding("tasks/result", TaskIdParams, self.result, protocol_versions=handshake),
            MethodBinding(
                "tasks/list", types.PaginatedRequestParams, self.list, protocol_versions=handshake
            ),
        ):
            server.add_request_handler(method.method, method.params_type, version_gated(method))
        server.middleware.append(self.answer)

    # -- the middleware --

    async def answer(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Middleware: a handshake-era `tools/call` with `params.task` becomes a task here,
        before the SDK would hold its answer to `CallToolResult`; `initialize` says so."""
        if is_modern(ctx):
            return await call_next(ctx)
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and isinstance(result.get("capabilities"), dict):
                result["capabilities"]["tasks"] = SERVER_CAPABILITY
            return result
        if ctx.method != "tools/call":
            return await call_next(ctx)
        raw: Any = ctx.params or {}
        cap = self.tasks.capabilities.get(str(raw.get("name", "")))
        if cap is None:
            return await call_next(ctx)  # an unknown tool: refused as any call is
        # The tool-level negotiation of 2025-11-25: a `forbidden` tool called as a task, or
        # a `required` one called without, is -32601.
        support = task_support_of(cap)
        asked = isinstance(raw.get("task"), dict)
        if asked and support == "forbidden":
            raise MCPError(METHOD_NOT_FOUND, f"{raw.get('name')} cannot be called as a task")
        if not asked:
            if support == "required":
                raise MCPError(METHOD_NOT_FOUND, f"{raw.get('name')} must be called as a task")
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            raise MCPError(INVALID_PARAMS, "Invalid request parameters") from None
        started = await self.tasks.start(ctx, cap, params.arguments)
        if isinstance(started, types.CallToolResult):
            return in_era(started, ctx.protocol_version)
        self._remember(ctx, started)
        return {"task": self.book.legacy_body(started), "_meta": related(started.task_id)}

    def _remember(self, ctx: ServerRequestContext[Any, Any], state: TaskState) -> None:
        """This session lists the task, and is told of its status on its standalone stream."""
        conn = connection_of(ctx)
        listed: list[str] = conn.state.setdefault(_STATE_TASKS, [])
        listed.append(state.task_id)
        del listed[:-LISTED_TASKS]
        if self.hub is None:
            return
        watches: set[asyncio.Task[None]] | None = conn.state.get(_STATE_WATCHES)
        if watches is None:
            watches = conn.state[_STATE_WATCHES] = set()
            conn.exit_stack.push_async_callback(_stop_all, watches)
        if len(watches) >= WATCHED_TASKS:
            return
        watch = asyncio.create_task(self._tell_status(conn, state), name="majordomus-task-status")
        watches.add(watch)
        watch.add_done_callback(watches.discard)

    async def _tell_status(self, conn: Connection, state: TaskState) -> None:
        """`notifications/tasks/status` on each change of one task, until it ends."""
        assert self.hub is not None
        woken = asyncio.Event()
        watch = TaskWatch(self.book, self.hub, state, woken.set)
        watch.sent = state.shown  # the CreateTaskResult said so already

        async def send(now: TaskState) -> None:
            params = {**self.book.legacy_body(now), "_meta": related(now.task_id)}
            await conn.notify("notifications/tasks/status", params)

        try:
            while not self.hub.closed:
                woken.clear()
                await watch.catch_up(send)
                if watch.state.final:
                    return
                await within(IDLE_CHECK_SECONDS, woken.wait())
        except Exception:  # noqa: BLE001  a notification is best effort; polling still works
            log.warning("task status notifications of %s stopped", state.task_id, exc_info=True)
        finally:
            watch.close()

    # -- the methods --

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        state = await self.book.find(params.task_id, self.tasks.owner(ctx))
        return {**self.book.legacy_body(state), "_meta": related(state.task_id)}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        owner = self.tasks.owner(ctx)
        state = await self.book.find(params.task_id, owner)
        if state.final:
            raise MCPError(INVALID_PARAMS, f"Cannot cancel task: already {state.status}")
        await self.tasks.stop(state)
        state = await self.book.find(params.task_id, owner)
        return {**self.book.legacy_body(state), "_meta": related(state.task_id)}

    async def result(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        """The tool's result once the task ended: waited for while it works (the request
        is the wait; a client that goes away ends it, never the task)."""
        state = await self.book.find(params.task_id, self.tasks.owner(ctx))
        if not state.final:
            state = await self._until_final(state)
        result = self.book.tool_result(state)
        result.meta = {**(result.meta or {}), **related(state.task_id)}
        return in_era(result, ctx.protocol_version)

    async def _until_final(self, state: TaskState) -> TaskState:
        hub = self.hub
        if hub is None:
            while not state.final:
                await asyncio.sleep(0.2)
                state = await self.book.reread(state)
            return state
        woken = asyncio.Event()
        watch = TaskWatch(self.book, hub, state, woken.set)

        async def ignore(_: TaskState) -> None:
            return None

        try:
            while True:
                woken.clear()
                await watch.catch_up(ignore)
                if watch.state.final or hub.closed:
                    return watch.state
                await within(IDLE_CHECK_SECONDS, woken.wait())
        finally:
            watch.close()

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> HandlerResult:
        """This session's tasks, newest first, `LIST_PAGE` a page (a task created in
        another session is not listed: a list scoped wider would show one caller's task
        ids to another)."""
        listed: list[str] = list(reversed(connection_of(ctx).state.get(_STATE_TASKS, [])))
        try:
            start = int(params.cursor or 0)
        except ValueError:
            raise MCPError(INVALID_PARAMS, "Invalid cursor") from None
        page = listed[start : start + LIST_PAGE]
        found = await self.book.find_many(page, self.tasks.owner(ctx))
        answer: dict[str, Any] = {
            "tasks": [self.book.legacy_body(state) for state in found if state is not None]
        }
        if start + LIST_PAGE < len(listed):
            answer["nextCursor"] = str(start + LIST_PAGE)
        return answer


async def _stop_all(watches: set[asyncio.Task[None]]) -> None:
    for watch in list(watches):
        watch.cancel()
    if watches:
        await asyncio.gather(*watches, return_exceptions=True)
