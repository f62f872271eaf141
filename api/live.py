"""The live channel (`GET /events`, SSE) and the one feed reader behind it.

`FeedHub` is the only thing in an API process that blocks on Redis for live events: one
task does `XREAD BLOCK` on the global feed and hands each entry to the listeners that want
it (the channels of that execution, every unscoped channel, and `executions.wait` long
polls), each through a bounded buffer. So an API process holds a bounded number of Redis
connections however many clients listen, and a slow client never slows an execution or
another client: when its buffer overflows it is marked behind, stops receiving, and catches
up from Redis (the execution's own stream, or the feed) from the last event it was sent;
if the store dropped some of those meanwhile it is told so with `stream.lagged{dropped}`.

History then live, with no gap and no duplicate: a channel registers with the hub first,
then reads the history after its cursor, then drops live entries it already sent (by
sequence, or by feed id on the unscoped channel). Anything appended after the history read
reaches the listener through the hub, because it registered before that read.

This module speaks SSE over raw ASGI (Litestar's `ServerSentEvent` neither reads
`Last-Event-ID` nor sends keep-alive comments). It does not check origins or tokens:
`api.access` does that before a request gets here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from litestar.types import Receive, Scope, Send

from api.access import header
from api.errors import REDIS_DOWN, classify, send_error
from majordomus.config import LIMITS, Settings
from majordomus.engine import LIVE_PATH
from majordomus.errors import MajordomusError, invalid_input, not_found, unavailable
from majordomus.ids import PROTOCOL_VERSION, require_execution_id
from majordomus.model import (
    TERMINAL_EVENT_TYPES,
    StreamClosing,
    StreamClosingData,
    StreamLagged,
    StreamLaggedData,
    StreamReady,
    StreamReadyData,
)
from majordomus.states import FINAL
from majordomus.store.executions import Store

log = logging.getLogger("majordomus.live")


LISTENER_BUFFER = 1024
"""Entries one listener may have waiting before it is marked behind and catches up from Redis."""
READ_BLOCK_MS = 5000
"""How long the shared reader blocks on the feed per call (it loops at once when woken)."""
FEED_PAGE = 1000
"""Feed entries read per call, by the shared reader and by a catching-up unscoped channel."""
MISSED_IDS_KEPT = 20_000
"""Feed ids an unscoped listener remembers missing while behind (to count what was dropped)."""
HUB_START_WAIT = 5.0
"""How long a new channel waits for the shared reader to reach Redis before answering 503."""
HISTORY_PAGE = 100
"""Events of a channel's history read and written at a time."""
CHANNEL_PARAMETERS = frozenset({"execution", "after"})

_FEED_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
_SEQUENCE = re.compile(r"^\d{1,18}$")


class _Head(msgspec.Struct):
    type: str
    sequence: int


_head = msgspec.json.Decoder(_Head)


def event_type(envelope: bytes) -> str:
    return _head.decode(envelope).type


def sequence_of(envelope: bytes) -> int:
    return _head.decode(envelope).sequence


def feed_key(feed_id: str) -> tuple[int, int]:
    ms, _, seq = feed_id.partition("-")
    return int(ms), int(seq or 0)


def feed_id_of(text: str) -> str:
    """A cursor of the unscoped channel as a full feed id (`1701234567890` is `...-0`)."""
    ms, seq = feed_key(text)
    return f"{ms}-{seq}"


class FeedEntry:
    """One feed entry as the hub hands it to every listener: its envelope parsed once, and
    its SSE message formatted once (per channel kind) however many listeners send it."""

    __slots__ = ("feed_id", "execution_id", "sequence", "envelope", "type", "_scoped", "_feed")

    def __init__(self, feed_id: str, execution_id: str, sequence: int, envelope: bytes) -> None:
        self.feed_id = feed_id
        self.execution_id = execution_id
        self.sequence = sequence
        self.envelope = envelope
        self.type = event_type(envelope)
        self._scoped: bytes | None = None
        self._feed: bytes | None = None

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

    def scoped_message(self) -> bytes:
        """The message of the execution's own channel (its sequence as the SSE id)."""
        if self._scoped is None:
            self._scoped = sse_event(self.sequence, self.type, self.envelope)
        return self._scoped

    def feed_message(self) -> bytes:
        """The message of the unscoped channel (the feed id as the SSE id)."""
        if self._feed is None:
            self._feed = sse_event(self.feed_id, self.type, self.envelope)
        return self._feed


def feed_entries(raw: Iterable[tuple[str, str, int, bytes]]) -> list[FeedEntry]:
    return [FeedEntry(*fields) for fields in raw]


# -- the shared reader ------------------------------------------------------------------------


class Listener:
    """One consumer of the hub: a bounded buffer, and a flag for having fallen behind."""

    def __init__(self, execution_id: str | None, size: int, start_id: str | None) -> None:
        self.execution_id = execution_id
        self.size = size
        self.start_id = start_id
        """The hub's cursor when this listener registered: everything after it is offered."""
        self.items: deque[FeedEntry] = deque()
        self.behind = False
        self.missed: deque[str] = deque(maxlen=MISSED_IDS_KEPT)
        self.missed_beyond = 0
        self.closing: str | None = None
        self._waiter: asyncio.Future[bool] | None = None

    def offer(self, entry: FeedEntry) -> None:
        if not self.behind and len(self.items) < self.size:
            self.items.append(entry)
        else:
            self.behind = True
            if self.execution_id is None:
                if len(self.missed) == MISSED_IDS_KEPT:
                    self.missed_beyond += 1
                self.missed.append(entry.feed_id)
        self._wake()

    def close(self, reason: str) -> None:
        self.closing = reason
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def caught_up(self) -> None:
        """Forget the buffer: the caller reads Redis next, so nothing offered later is lost."""
        self.items.clear()
        self.behind = False

    async def wait(self, timeout: float) -> bool:
        """Until there is something to do (an entry, being behind, closing); False on timeout."""
        if self.items or self.behind or self.closing:
            return True
        # A bare future and a timer rather than `wait_for` on an `Event`: a fan-out wakes
        # every listener of an execution per event, and `wait_for` costs each a new task.
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _time_out, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class FeedHub:
    """The one `XREAD BLOCK` of an API process, fanned out to every listener."""

    def __init__(self, store: Store, settings: Settings, buffer: int = LISTENER_BUFFER) -> None:
        self.store = store
        self.settings = settings
        self.buffer = buffer
        self.scoped: dict[str, set[Listener]] = {}
        self.unscoped: set[Listener] = set()
        self.channels = 0
        """Open live channels (bounded by `MAJORDOMUS_MAX_LIVE`); long polls are not counted."""
        self.cursor: str | None = None
        self.started = asyncio.Event()
        self.healthy = False
        self.closed = False
        self.dispatched = 0
        self._task: asyncio.Task[None] | None = None

    # -- life --

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="majordomus-feed-reader")

    async def stop(self, reason: str = "server stopping") -> None:
        self.close_all(reason)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def close_all(self, reason: str = "server stopping") -> None:
        """End every live channel with `stream.closing{reason}` (clients reconnect elsewhere)."""
        self.closed = True
        for listener in self._all():
            listener.close(reason)

    def _all(self) -> Iterable[Listener]:
        yield from list(self.unscoped)
        for group in list(self.scoped.values()):
            yield from list(group)

    @property
    def listeners(self) -> int:
        return len(self.unscoped) + sum(len(g) for g in self.scoped.values())

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                if self.cursor is None:
                    _, newest, _ = await self.store.feed_state()
                    self.cursor = newest or "0-0"
                    self.started.set()
                entries = feed_entries(
                    await self.store.read_feed(self.cursor, READ_BLOCK_MS, FEED_PAGE)
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.healthy or backoff == 0.1:
                    level = logging.WARNING if isinstance(exc, REDIS_DOWN) else logging.ERROR
                    log.log(
                        level, "feed reader: %s; retrying", exc, exc_info=level > logging.WARNING
                    )
                self.healthy = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if not self.healthy:
                log.info("feed reader: following the feed from %s", self.cursor)
            self.healthy = True
            backoff = 0.1
            if entries:
                # The cursor moves and the entries go out with no await in between, so a
                # listener registering now is offered exactly the entries after `cursor`.
                self.cursor = entries[-1].feed_id
                self._dispatch(entries)

    def _dispatch(self, entries: list[FeedEntry]) -> None:
        for entry in entries:
            for listener in self.unscoped:
                listener.offer(entry)
            group = self.scoped.get(entry.execution_id)
            if group:
                for listener in group:
                    listener.offer(entry)
        self.dispatched += len(entries)

    # -- listeners --

    def register(self, execution_id: str | None) -> Listener:
        listener = Listener(execution_id, self.buffer, self.cursor)
        if execution_id is None:
            self.unscoped.add(listener)
        else:
            self.scoped.setdefault(execution_id, set()).add(listener)
        if self.closed:
            listener.close("server stopping")
        return listener

    def unregister(self, listener: Listener) -> None:
        if listener.execution_id is None:
            self.unscoped.discard(listener)
            return
        group = self.scoped.get(listener.execution_id)
        if group is not None:
            group.discard(listener)
            if not group:
                del self.scoped[listener.execution_id]

    async def ready(self) -> None:
        """Wait (bounded) until the reader has its cursor; `unavailable` if Redis is away."""
        if self.started.is_set():
            return
        try:
            await asyncio.wait_for(self.started.wait(), HUB_START_WAIT)
        except TimeoutError:
            raise unavailable(
                "the live channel cannot reach Redis yet", "try again shortly"
            ) from None

    async def read_after(self, execution_id: str, after: int, block_ms: int) -> list[bytes]:
        """`Engine.follow` for `executions.wait`: the events after `after`, waiting on the hub
        (not on a Redis connection of its own) for up to `block_ms` when there are none."""
        listener = self.register(execution_id)
        try:
            page = await self.store.page(execution_id, after, LIMITS.page_events)
            if page is None:
                return []
            if page.events or page.state in FINAL:
                return page.events
            if self.healthy and not self.closed:
                if not await listener.wait(block_ms / 1000):
                    return []
            else:
                # Not following the feed right now (Redis was away, or stopping): poll.
                await asyncio.sleep(min(block_ms, 500) / 1000)
            page = await self.store.page(execution_id, after, LIMITS.page_events)
            return page.events if page is not None else []
        finally:
            self.unregister(listener)


# -- the SSE endpoint -------------------------------------------------------------------------


def sse_event(event_id: str | int | None, event: str, data: bytes) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\n".encode() + b"data: " + data + b"\n\n"


def control(message: Any) -> bytes:
    return sse_event(None, message.__struct_config__.tag, msgspec.json.encode(message))


def closing(reason: str) -> bytes:
    return control(StreamClosing(StreamClosingData(reason)))


def lagged(dropped: int) -> bytes:
    return control(StreamLagged(StreamLaggedData(dropped)))


HEARTBEAT = b": heartbeat\n\n"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def accepts_event_stream(accept: str | None) -> bool:
    """Whether `Accept` admits text/event-stream (absent, `*/*` and `text/*` do)."""
    if accept is None or not accept.strip():
        return True
    for part in accept.split(","):
        media, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0 and media.lower() in ("text/event-stream", "text/*", "*/*"):
            return True
    return False


class ChannelRequest(msgspec.Struct):
    execution_id: str | None
    cursor: str | None
    """A sequence (scoped) or a feed id (unscoped); `Last-Event-ID` wins over `after`."""


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
            else (_FEED_ID, "a feed id such as 1701234567890-0")
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

    def __init__(self, hub: FeedHub, settings: Settings) -> None:
        self.hub = hub
        self.store = hub.store
        self.settings = settings

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
        listener = hub.register(request.execution_id)
        hub.channels += 1
        stream = _Stream(send)
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

    async def _serve(
        self, request: ChannelRequest, listener: Listener, stream: _Stream, receive: Receive
    ) -> None:
        await self.hub.ready()
        watcher = asyncio.create_task(_watch_disconnect(receive, asyncio.current_task()))
        try:
            if request.execution_id is None:
                await self._serve_all(request.cursor, listener, stream)
            else:
                await self._serve_execution(
                    request.execution_id, int(request.cursor or 0), listener, stream
                )
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if watcher.done() and not watcher.cancelled() and watcher.result():
                if me is not None:
                    me.uncancel()
                raise Disconnected() from None
            raise
        finally:
            watcher.cancel()

    # -- one execution --

    @staticmethod
    def _emit(envelopes: list[bytes], last: int, chunk: list[bytes], lag: bool) -> tuple[int, bool]:
        """Format the events after `last` into `chunk`; a jump in sequence (the store dropped
        events this client had not been sent) is announced with `stream.lagged` when `lag`.
        Answers the new last sequence and whether a terminal event went out."""
        for envelope in envelopes:
            seq = sequence_of(envelope)
            if seq <= last:
                continue
            if lag and seq > last + 1:
                chunk.append(lagged(seq - last - 1))
            chunk.append(_event_message(seq, envelope))
            last = seq
            if event_type(envelope) in TERMINAL_EVENT_TYPES:
                return last, True
        return last, False

    async def _replay(
        self, execution_id: str, last: int, chunk: list[bytes], stream: _Stream
    ) -> tuple[int, bool, bool]:
        """Send what the store holds after `last`, a page at a time (so a burst of clients
        replaying at once holds a page each in memory). Answers (last, ended, gone)."""
        while True:
            page = await self.store.page(execution_id, last, HISTORY_PAGE)
            if page is None:
                return last, False, True
            last, ended = self._emit(page.events, last, chunk, lag=True)
            if ended or not page.more or not page.events:
                return last, ended or (not page.events and page.state in FINAL), False
            await stream.write(b"".join(chunk))
            chunk.clear()

    async def _serve_execution(
        self, execution_id: str, after: int, listener: Listener, stream: _Stream
    ) -> None:
        first = await self.store.page(execution_id, after, HISTORY_PAGE)
        if first is None:
            raise not_found(
                f"there is no execution {execution_id}",
                "it may have finished longer ago than the retention",
            )
        if not first.events and first.state in FINAL and after >= first.last_sequence:
            await stream.no_content()
            return
        upto = first.last_sequence
        oldest = sequence_of(first.events[0]) if first.events else upto + 1
        ready = StreamReady(
            StreamReadyData(
                protocol_version=PROTOCOL_VERSION,
                scope="executions",
                executions=[execution_id],
                replayed=max(0, upto - oldest + 1),
                truncated=first.truncated,
                heartbeat_seconds=self.settings.heartbeat_seconds,
            )
        )
        await stream.start()
        chunk = [control(ready)]
        # What was dropped before the cursor is `truncated` above, not a lag.
        last, ended = self._emit(first.events, after, chunk, lag=False)
        gone = False
        if not ended and first.more:
            await stream.write(b"".join(chunk))
            chunk = []
            last, ended, gone = await self._replay(execution_id, last, chunk, stream)
        ended = ended or (not first.more and first.state in FINAL)
        if ended or gone:
            chunk.append(closing("finished" if ended else "gone"))
            await stream.write(b"".join(chunk), final=True)
            return
        await stream.write(b"".join(chunk))
        await self._follow_execution(execution_id, last, listener, stream)

    async def _follow_execution(
        self, execution_id: str, last: int, listener: Listener, stream: _Stream
    ) -> None:
        heartbeat = self.settings.heartbeat_seconds
        while True:
            if not await listener.wait(heartbeat):
                await stream.write(HEARTBEAT)
                continue
            if listener.closing:
                await stream.write(closing(listener.closing), final=True)
                return
            chunk: list[bytes] = []
            ended = gap = gone = False
            while listener.items and not ended:
                entry = listener.items.popleft()
                seq = entry.sequence
                if seq <= last:
                    # Already sent, or before a cursor past the end; a terminal one still
                    # ends the channel.
                    ended = entry.terminal
                    continue
                if seq != last + 1:
                    gap = True
                    break
                chunk.append(entry.scoped_message())
                last, ended = seq, entry.terminal
            if not ended and (gap or (listener.behind and not listener.items)):
                # Behind: forget the buffer (Redis is read next, so nothing offered from now
                # on is lost) and catch up from the execution's own stream.
                listener.caught_up()
                last, ended, gone = await self._replay(execution_id, last, chunk, stream)
            if ended or gone:
                chunk.append(closing("finished" if ended else "gone"))
                await stream.write(b"".join(chunk), final=True)
                return
            if chunk:
                await stream.write(b"".join(chunk))

    # -- every execution --

    async def _serve_all(self, cursor: str | None, listener: Listener, stream: _Stream) -> None:
        events: list[FeedEntry] = []
        truncated = False
        last_id = listener.start_id or "0-0"
        if cursor is not None:
            last_id = feed_id_of(cursor)
            oldest, _, length = await self.store.feed_state()
            truncated = (
                oldest is not None
                and feed_key(oldest) > feed_key(last_id)
                and length >= self.settings.feed_max_events
            )
            events = await self._feed_after(last_id)
        ready = StreamReady(
            StreamReadyData(
                protocol_version=PROTOCOL_VERSION,
                scope="all",
                replayed=len(events),
                truncated=truncated,
                heartbeat_seconds=self.settings.heartbeat_seconds,
            )
        )
        await stream.start()
        chunk = [control(ready)]
        for entry in events:
            chunk.append(entry.feed_message())
            last_id = entry.feed_id
        await stream.write(b"".join(chunk))
        await self._follow_all(last_id, listener, stream)

    async def _feed_after(self, after_id: str) -> list[FeedEntry]:
        entries: list[FeedEntry] = []
        while True:
            page = feed_entries(await self.store.feed_after(after_id, FEED_PAGE))
            entries.extend(page)
            if len(page) < FEED_PAGE:
                return entries
            after_id = page[-1].feed_id

    async def _follow_all(self, last_id: str, listener: Listener, stream: _Stream) -> None:
        heartbeat = self.settings.heartbeat_seconds
        last = feed_key(last_id)
        while True:
            if not await listener.wait(heartbeat):
                await stream.write(HEARTBEAT)
                continue
            if listener.closing:
                await stream.write(closing(listener.closing), final=True)
                return
            chunk: list[bytes] = []
            while listener.items:
                entry = listener.items.popleft()
                key = feed_key(entry.feed_id)
                if key <= last:
                    continue
                chunk.append(entry.feed_message())
                last, last_id = key, entry.feed_id
            if listener.behind:
                missed, beyond = list(listener.missed), listener.missed_beyond
                listener.missed.clear()
                listener.missed_beyond = 0
                listener.caught_up()
                oldest, _, _ = await self.store.feed_state()
                dropped = beyond + sum(
                    1 for m in missed if oldest is None or feed_key(m) < feed_key(oldest)
                )
                if dropped:
                    chunk.append(lagged(dropped))
                for entry in await self._feed_after(last_id):
                    chunk.append(entry.feed_message())
                    last, last_id = feed_key(entry.feed_id), entry.feed_id
            if chunk:
                await stream.write(b"".join(chunk))


class _Stream:
    """The response side of one channel over raw ASGI."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def start(self) -> None:
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        self.started = True

    async def no_content(self) -> None:
        await self.send({"type": "http.response.start", "status": 204, "headers": []})
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        self.started = True

    async def write(self, body: bytes, final: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": not final})


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any] | None) -> bool:
    """Cancel the channel's task when the client goes away (uvicorn's `send` does not raise)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if task is not None:
                task.cancel()
            return True


def _event_message(seq: int, envelope: bytes) -> bytes:
    return sse_event(seq, event_type(envelope), envelope)
