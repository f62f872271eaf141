"""Pushed task status: `subscriptions/listen` with `taskIds`, fed by the API's one feed reader.

A 2026-07-28 client that declared the tasks extension opens a `subscriptions/listen` stream
naming tasks of its own (`notifications.taskIds`). The stream is acknowledged with the ids
that will be followed (those its caller owns: any other is left out, as if it did not
exist), then carries each task's state at once, then a `notifications/tasks` with the whole
`DetailedTask` (as `tasks/get` would answer it then) whenever its status or its status
message changes; so an agent need not poll at all. No progress or log notification is ever
sent on it, as the extension requires.

Each followed task is a listener of the process's shared feed reader (`api.live.FeedHub`),
so a thousand subscriptions hold no Redis connection: the status is folded from the events
the reader hands on (`api.mcp.tasks.TaskState`); only a subscriber that fell behind the
feed, or a task whose attempt failed and was retried, reads Redis again.

`TaskWatch` (one task followed) is shared with the 2025-11-25 era's status notifications
(`api.mcp.tasks_2025`). This module neither opens tasks nor answers `tasks/get`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
from mcp import MCPError, types
from mcp.server import ServerRequestContext
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

from majordomus.api.live import FeedHub, Listener
from majordomus.api.mcp.tasks import (
    TaskBook,
    TaskState,
    declared_extension,
    missing_extension,
    parse_task_id,
)
from majordomus.errors import MajordomusError
from majordomus.loops import within
from majordomus.model import event_decoder
from majordomus.retries import MAX_ATTEMPTS

log = logging.getLogger("majordomus.mcp")

MAX_TASKS_PER_STREAM = 1000
"""Tasks one listen stream follows at most; ids past it are left out of the acknowledgement."""
MAX_STREAMS = 1024
"""Listen streams one API process serves at once; one more is refused (`INTERNAL_ERROR`)."""
IDLE_CHECK_SECONDS = 5.0
"""How often an idle stream looks whether the process is stopping (it then ends gracefully)."""

Send = Callable[[TaskState], Awaitable[None]]


class TaskSubscriptionFilter(types.SubscriptionFilter):
    """The listen filter with the extension's member: `taskIds`."""

    task_ids: list[str] | None = None


class TaskListenParams(types.SubscriptionsListenRequestParams):
    notifications: TaskSubscriptionFilter


class RawNotification(types.Notification[dict[str, Any], str]):
    """A notification the SDK has no type for (`notifications/tasks`, the acknowledgement
    with `taskIds`), sent through the session as any other."""


class TaskWatch:
    """One task followed on the shared feed: its state folded from each event of its
    execution, and `send` called whenever what it shows changes.

    The listener is registered before the state it starts from is read (`listener`, when
    given), so no event falls between the two; an event the read already holds is skipped
    by its sequence. When the task moves to another execution (a retried attempt), or its
    listener fell behind the feed, the state is read again from Redis.
    """

    def __init__(
        self,
        book: TaskBook,
        hub: FeedHub,
        state: TaskState,
        wake: Callable[[], None],
        listener: Listener | None = None,
    ) -> None:
        self.book = book
        self.hub = hub
        self.state = state
        self.wake = wake
        self.sent: tuple[str, str] | None = None
        self.stale = False
        if listener is not None and listener.execution_id != state.execution_id:
            hub.unregister(listener)
            listener = None
        if listener is None:
            listener = hub.register(state.execution_id, wake)
            self.stale = True  # registered after the read: read again
        self.listener = listener

    def close(self) -> None:
        self.hub.unregister(self.listener)

    async def catch_up(self, send: Send) -> None:
        """Fold what the feed handed on since the last look; tell `send` of every change."""
        for _ in range(MAX_ATTEMPTS + 1):
            if self.stale or self.listener.behind:
                self.stale = False
                self.listener.caught_up()
                self._follow(await self.book.reread(self.state))
                continue
            items = self.listener.items
            while items and not self.stale:
                entry = items.popleft()
                if entry.sequence <= self.state.sequence:
                    continue
                self.state.apply(event_decoder.decode(entry.envelope), self.book.steps_cap)
                if self.state.state == "failed":
                    # Retried? The failure event does not say; the snapshot does (its link
                    # is written before the failure), and the task then goes on as the retry.
                    self._follow(await self.book.reread(self.state))
                await self.tell(send)
            if not self.stale:
                break
        await self.tell(send)

    def _follow(self, state: TaskState) -> None:
        """The task goes on as `state`: read again, or a later attempt of its chain (whose
        events are then followed, from a read made after the listener moved)."""
        if state.execution_id != self.state.execution_id:
            self.hub.unregister(self.listener)
            self.listener = self.hub.register(state.execution_id, self.wake)
            self.stale = True
        self.state = state

    async def tell(self, send: Send) -> None:
        if self.state.shown != self.sent:
            self.sent = self.state.shown
            await send(self.state)


class TaskListen:
    """Serves `subscriptions/listen`: the extension's `taskIds`, and the core filters (which
    are acknowledged and never fire: majordomus's tools, prompts and resources never change
    while it runs)."""

    def __init__(self, book: TaskBook, owner: Callable[[ServerRequestContext[Any, Any]], str]):
        self.book = book
        self.owner = owner
        self.hub: FeedHub | None = None
        self.streams = 0

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: TaskListenParams
    ) -> types.SubscriptionsListenResult:
        subscription = ctx.request_id
        if subscription is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        wanted = list(dict.fromkeys(params.notifications.task_ids or ()))
        if wanted and not declared_extension(ctx):
            raise missing_extension()
        hub = self.hub
        if hub is None:
            raise MCPError(INTERNAL_ERROR, "this server follows no feed")
        if self.streams >= MAX_STREAMS:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        self.streams += 1
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription}
        woken = asyncio.Event()
        dirty: set[str] = set()

        def waker(task_id: str) -> Callable[[], None]:
            def wake() -> None:
                dirty.add(task_id)
                woken.set()

            return wake

        watches: dict[str, TaskWatch] = {}
        try:
            try:
                await hub.ready()
            except MajordomusError as exc:
                raise MCPError(INTERNAL_ERROR, f"{exc.code}: {exc.message}") from None
            watches = await self._watch(hub, ctx, wanted[:MAX_TASKS_PER_STREAM], waker)
            await self._acknowledge(ctx, params, list(watches), meta)

            async def send(state: TaskState) -> None:
                body = self.book.body(state, result_type=None)
                body["_meta"] = {**body.get("_meta", {}), **meta}
                notice = RawNotification(method="notifications/tasks", params=body)
                await ctx.session.send_notification(cast(Any, notice), subscription)

            dirty.update(watches)  # each task's state as it stands, told first
            while not hub.closed:
                woken.clear()
                due = list(dirty)
                dirty.clear()
                for task_id in due:
                    watch = watches.get(task_id)  # None: a listener let go while it woke us
                    if watch is not None:
                        await watch.catch_up(send)
                if hub.closed:
                    break
                if not dirty:
                    await within(IDLE_CHECK_SECONDS, woken.wait())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("listen stream %r: the client went away", subscription)
        finally:
            self.streams -= 1
            for watch in watches.values():
                watch.close()
        return types.SubscriptionsListenResult(_meta=meta)

    async def _watch(
        self,
        hub: FeedHub,
        ctx: ServerRequestContext[Any, Any],
        task_ids: list[str],
        waker: Callable[[str], Callable[[], None]],
    ) -> dict[str, TaskWatch]:
        """The tasks of this caller among `task_ids`, each followed from now on (listeners
        first, then one read of them all), by task id; each wakes the stream with its id."""
        listeners: dict[str, Listener] = {}
        for task_id in task_ids:
            ids = parse_task_id(task_id)
            if ids is not None:
                listeners[task_id] = hub.register(ids[0], waker(task_id))
        try:
            found = await self.book.find_many(list(listeners), self.owner(ctx))
        except BaseException:
            for listener in listeners.values():
                hub.unregister(listener)
            raise
        watches: dict[str, TaskWatch] = {}
        for (task_id, listener), state in zip(listeners.items(), found, strict=True):
            if state is None:
                hub.unregister(listener)
            else:
                watches[task_id] = TaskWatch(self.book, hub, state, waker(task_id), listener)
        return watches

    async def _acknowledge(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: TaskListenParams,
        honored: list[str],
        meta: dict[str, Any],
    ) -> None:
        asked = params.notifications
        notifications: dict[str, Any] = {
            name: True
            for name, value in (
                ("toolsListChanged", asked.tools_list_changed),
                ("promptsListChanged", asked.prompts_list_changed),
                ("resourcesListChanged", asked.resources_list_changed),
            )
            if value
        }
        if asked.resource_subscriptions:
            notifications["resourceSubscriptions"] = list(asked.resource_subscriptions)
        if honored:
            notifications["taskIds"] = honored
        ack = RawNotification(
            method="notifications/subscriptions/acknowledged",
            params={"notifications": notifications, "_meta": meta},
        )
        await ctx.session.send_notification(cast(Any, ack), ctx.request_id)
