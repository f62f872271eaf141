"""Server-sent events over raw ASGI: the framing of a message, the response, the client's end.

Litestar's `ServerSentEvent` neither reads `Last-Event-ID` nor sends keep-alive comments,
so the live channel writes the protocol itself: `sse_event` frames one message, the
`stream.*` control messages are framed from their Structs, and `EventStream` is the
response side of one channel. This module knows the wire format only; what a channel sends,
and when, is `api.live.channel`'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar.types import Receive, Send

from majordomus.model import StreamClosing, StreamClosingData, StreamLagged, StreamLaggedData

HEARTBEAT = b": heartbeat\n\n"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def sse_event(event_id: str | int | None, event: str, data: bytes) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\n".encode() + b"data: " + data + b"\n\n"


def control(message: Any) -> bytes:
    return sse_event(None, message.__struct_config__.tag, msgspec.json.encode(message))


def closing(reason: str) -> bytes:
    return control(StreamClosing(StreamClosingData(reason)))


def lagged(dropped: int, after: str | None = None, upto: str | None = None) -> bytes:
    return control(StreamLagged(StreamLaggedData(dropped, after, upto)))


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


class EventStream:
    """The response side of one channel over raw ASGI.

    Besides `write`, a channel's live events can go out with `write_now`, from the feed
    reader's task rather than the channel's own: one event to a thousand listeners then
    costs a thousand writes, not a thousand task wake-ups as well. A server's `send`
    completes without suspending unless the client is slow (its buffer full); one that
    suspends is finished by a task of its own, `pending`, which the next `write` (and
    `settle`) awaits first, so the messages keep their order and its error is raised.
    """

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self.pending: asyncio.Future[None] | None = None
        """A `write_now` whose `send` suspended, finishing on its own."""

    async def start(self) -> None:
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        self.started = True

    async def no_content(self) -> None:
        await self.send({"type": "http.response.start", "status": 204, "headers": []})
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        self.started = True

    async def write(self, body: bytes, final: bool = False) -> None:
        await self.settle()
        await self.send({"type": "http.response.body", "body": body, "more_body": not final})

    def write_now(self, body: bytes) -> bool:
        """Write `body` at once, from any task; False when the send suspended (its rest is
        `pending`: nothing may be written before it is settled)."""
        step: Any = self.send({"type": "http.response.body", "body": body, "more_body": True})
        try:
            waiting_on = step.send(None)
        except StopIteration:
            return True
        except Exception as exc:  # noqa: BLE001  raised by the channel's task, in `settle`
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            self.pending = failed
            return False
        self.pending = asyncio.ensure_future(_finish(step, waiting_on))
        return False

    async def settle(self) -> None:
        """Await a `write_now` that suspended; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            await pending

    def abandon(self) -> None:
        """The channel ended: a `write_now` still pending is stopped (its error dropped)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.done():
            if not pending.cancelled():
                pending.exception()  # retrieved: the channel is gone, nobody is told
        else:
            pending.cancel()


async def _finish(step: Any, waiting_on: Any) -> None:
    """Run to its end a coroutine that suspended (on `waiting_on`) outside any task."""
    try:
        while True:
            if asyncio.isfuture(waiting_on):
                await asyncio.wait((waiting_on,))
            else:
                await asyncio.sleep(0)  # a bare yield: it asked for a turn of the loop
            waiting_on = step.send(None)
    except StopIteration:
        return
    finally:
        step.close()


async def watch_disconnect(receive: Receive, task: asyncio.Task[Any] | None) -> bool:
    """Cancel the channel's task when the client goes away (uvicorn's `send` does not raise)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if task is not None:
                task.cancel()
            return True
