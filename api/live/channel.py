"""The live channel's endpoint (`GET /events`): admission, the request, and the one loop.

`LiveChannel` is the raw ASGI endpoint: it refuses what is not a GET for text/event-stream
with a valid cursor, or past `MAJORDOMUS_MAX_LIVE` channels; registers a listener with the
hub; opens the channel on its scope (`api.live.scopes`); and then runs the loop every
channel follows: wait for the listener, beat while nothing comes, send what the scope makes
of what came, and end with `stream.closing{reason}` when the scope or the hub says so.
While it waits, its `Passthrough` lets the hub write the next event in order straight to
the client, so a live event reaches a thousand listeners with no task woken for it.

It does not check origins or tokens: `api.access` does that before a request gets here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from urllib.parse import parse_qsl

import msgspec
from litestar.types import Receive, Scope, Send

from majordomus.api.access import header
from majordomus.api.access_log import HANDED_ON
from majordomus.api.errors import classify, send_error
from majordomus.api.live.apart import Handoff, end_connection
from majordomus.api.live.feed import FeedEntry, FeedHub, Listener
from majordomus.api.live.scopes import ChannelScope, ExecutionScope, FeedScope
from majordomus.api.live.sse import (
    HEARTBEAT,
    EventStream,
    accepts_event_stream,
    closing,
    control,
    watch_disconnect,
)
from majordomus.config import Settings
from majordomus.engine import LIVE_PATH, Engine
from majordomus.errors import MajordomusError, invalid_input, unavailable
from majordomus.ids import require_execution_id
from majordomus.model import StreamReady

CHANNEL_PARAMETERS = frozenset({"execution", "after"})

_FEED_CURSOR = re.compile(r"^\d{1,20}(-\d{1,20})?(_\d{1,20}(-\d{1,20})?){0,1023}$")
"""The shape of a feed cursor, one stream id per partition (`majordomus.store.feed`); the
engine checks its parts against the bound and their count against the partitions."""
_SEQUENCE = re.compile(r"^\d{1,18}$")


class ChannelRequest(msgspec.Struct):
    execution_id: str | None
    cursor: str | None
    """A sequence (scoped) or a feed cursor (unscoped); `Last-Event-ID` wins over `after`."""


def parse_channel_request(scope: Scope) -> ChannelRequest:
    raw = scope.get("query_string", b"").decode("latin-1")
    params: dict[str, str] = {}
    for name, value in parse_qsl(raw, keep_blank_values=True):
        if name not in CHANNEL_PARAMETERS:
            raise invalid_input(
                f"the live channel has no parameter {name!r}",
                "its parameters are execution and after (see executions.protocol)",
            )
        if name in params:
            raise invalid_input(f"the parameter {name!r} is given more than once")
        params[name] = value
    execution_id = None
    if "execution" in params:
        execution_id = require_execution_id(params["execution"])
    cursor = params.get("after")
    last_event_id = header(scope, b"last-event-id")
    if last_event_id is not None and last_event_id.strip():
        cursor = last_event_id.strip()
    if cursor is not None:
        pattern, shape = (
            (_SEQUENCE, "a sequence number (0 or more)")
            if execution_id
            else (_FEED_CURSOR, "a feed id such as 1701234567890-0 (one a partition, joined by _)")
        )
        if not pattern.match(cursor):
            raise invalid_input(
                f"{cursor!r} is not a cursor of this channel", f"the cursor is {shape}"
            )
    return ChannelRequest(execution_id, cursor)


class Disconnected(Exception):
    """The client went away; the channel ends quietly."""


class Refusal(Exception):
    """A channel refused before it starts, with a status the error code does not imply."""

    def __init__(self, error: MajordomusError, status: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status


class LiveChannel:
    """The ASGI endpoint of `GET /events`."""

    def __init__(
        self, engine: Engine, hub: FeedHub, settings: Settings, handoff: Handoff | None = None
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.settings = settings
        self.handoff = handoff
        """`serve`'s live delivery process (`api.live.apart`): an admitted channel's
        connection goes to it when it can, and this process only waits for its end."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            request = self._admit(scope)
        except Refusal as refusal:
            await send_error(send, refusal.error, refusal.status)
            return
        except MajordomusError as err:
            await send_error(send, err)
            return
        hub = self.hub
        handoff = self.handoff
        handed = handoff.hand(scope) if handoff is not None else None
        if handed is not None:
            assert handoff is not None
            scope.setdefault("state", {})[HANDED_ON] = True  # its line is the other process's
            hub.channels += 1
            try:
                # Only the connection's end is awaited: this process writes nothing more.
                await watch_disconnect(receive, None)
            except asyncio.CancelledError:  # the server is forced to stop: nothing is said
                end_connection(handed)
                raise
            finally:
                hub.channels -= 1
                handoff.release(handed)
            return
        listener = hub.register(request.execution_id)
        hub.channels += 1
        stream = EventStream(send, hub.backlog.turns)
        try:
            await self._serve(request, listener, stream, receive)
        except Disconnected:
            pass
        except Exception as exc:
            failure, status = classify(exc, "GET", LIVE_PATH)
            if stream.started:
                # Past the headers there is no status to give: end the stream as a server
                # that is going away would, and the client reconnects with its cursor.
                with contextlib.suppress(Exception):
                    await stream.write(closing(failure.code), final=True)
            else:
                await send_error(send, failure, status)
        finally:
            hub.channels -= 1
            hub.unregister(listener)
            stream.abandon()

    def _admit(self, scope: Scope) -> ChannelRequest:
        if scope.get("method") != "GET":
            raise Refusal(invalid_input(f"{LIVE_PATH} answers GET only", "open it with GET"), 405)
        if not accepts_event_stream(header(scope, b"accept")):
            raise Refusal(
                invalid_input(
                    "the live channel answers text/event-stream only; for JSON pages of an "
                    "execution's events use executions.events",
                    "send Accept: text/event-stream, or GET /api/v1/executions/events?id=...",
                ),
                406,
            )
        request = parse_channel_request(scope)
        if self.hub.channels >= self.settings.max_live:
            raise unavailable(
                f"this API process already holds {self.settings.max_live} live channels",
                "try again later, another API replica, or executions.wait",
            )
        return request

    def _scope_of(self, request: ChannelRequest, listener: Listener) -> ChannelScope:
        if request.execution_id is None:
            return FeedScope(self.engine, request.cursor, listener, self.settings.feed_max_events)
        return ExecutionScope(self.engine, request.execution_id, int(request.cursor or 0))

    async def _serve(
        self, request: ChannelRequest, listener: Listener, stream: EventStream, receive: Receive
    ) -> None:
        await self.hub.ready()
        watcher = asyncio.create_task(watch_disconnect(receive, asyncio.current_task()))
        try:
            await self._send(self._scope_of(request, listener), listener, stream)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if watcher.done() and not watcher.cancelled() and watcher.result():
                if me is not None:
                    me.uncancel()
                raise Disconnected() from None
            raise
        finally:
            watcher.cancel()

    async def _send(self, scope: ChannelScope, listener: Listener, stream: EventStream) -> None:
        """`stream.ready`, the history, then what the listener is offered, until the end."""
        heartbeat = self.settings.heartbeat_seconds
        ready = await scope.ready(heartbeat)
        if ready is None:
            await stream.no_content()
            return
        await stream.start()
        chunk = [control(StreamReady(ready))]
        ending = await scope.replay(chunk, stream)
        hub = self.hub
        passthrough = Passthrough(scope, stream, listener, hub)
        while ending is None:
            if chunk:
                await stream.write(b"".join(chunk))
                chunk = []
            # A write to a slow client still going on is not waited for (`Passthrough.done`
            # follows it); one that ended in an error raises it here.
            stream.check()
            busy = stream.writing
            if busy:
                hub.park(listener)
            else:
                hub.unpark(listener)
            listener.passes = passthrough
            listener.sends = passthrough.sends
            try:
                woke = await listener.wait(heartbeat, busy=busy)
            finally:
                listener.passes = listener.sends = None
            if not woke:
                ending = await scope.idle()
                if ending is None and not stream.writing:  # quiet, not a client that is slow
                    chunk.append(HEARTBEAT)
            elif listener.closing:
                ending = listener.closing
            else:
                ending = await scope.advance(listener, chunk, stream)
        chunk.append(closing(ending))
        await stream.write(b"".join(chunk), final=True)


class Passthrough:
    """`Listener.passes` of a waiting channel: the next event in order is written to the
    client at once, from the hub's task (`EventStream.write_now`), and the channel's task
    is not woken; what its loop must see (a gap, the terminal event, a write that
    suspended and must be settled first) is declined and buffered as usual. The message
    is the one `FeedEntry` formatted once for every listener: the stored bytes as they are."""

    __slots__ = ("scope", "stream", "listener", "hub")

    def __init__(
        self, scope: ChannelScope, stream: EventStream, listener: Listener, hub: FeedHub
    ) -> None:
        self.scope = scope
        self.stream = stream
        self.listener = listener
        self.hub = hub
        stream.on_done = self.done

    def __call__(self, entry: FeedEntry) -> bool:
        stream = self.stream
        if stream.pending:
            return False
        message = self.scope.passing(entry)
        if message is None:
            return False
        if not stream.write_now(message):
            self.listener.nudge()  # its loop settles the write before anything else
        return True

    def sends(self) -> bool:
        """`Listener.sends` of a waiting unscoped channel: what the backlog holds past its
        position, written at once (at most `WRITE_BYTES`; its loop is woken for the rest).
        A write to a slow client that suspends goes on by itself, the channel's task left
        asleep: when it ends, the hub feeds the channel again (`done`)."""
        stream = self.stream
        if stream.pending:
            return True  # `done` asks for a round when it ends
        message = self.scope.unsent()
        if message is not None and not stream.write_now(message):
            self.hub.park(self.listener)
            return True
        if self.listener.unread:
            self.listener.nudge()
        return True

    def done(self, failed: bool) -> None:
        """`EventStream.on_done`: a write that suspended ended with no task settling it. A
        failure wakes the channel's task (its `settle` raises it); else, while the channel
        waits, what the backlog holds past its position goes in the hub's next round."""
        listener = self.listener
        listener.fed()  # it was sent something: its silence starts now
        self.hub.unpark(listener)
        if failed or listener.sends is None:
            listener.nudge()
        elif listener.unread:
            self.hub.feed_soon()
