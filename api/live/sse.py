"""Server-sent events over raw ASGI: the framing of a message, the response, the client's end.

Litestar's `ServerSentEvent` neither reads `Last-Event-ID` nor sends keep-alive comments,
so the live channel writes the protocol itself: `sse_event` frames one message, the
`stream.*` control messages are framed from their Structs, and `EventStream` is the
response side of one channel. This module knows the wire format only; what a channel sends,
and when, is `api.live.channel`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

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


class Pacing(Protocol):
    """What shares a turn of the event loop among the channels' writes (`feed.Turns`)."""

    def turn_now(self) -> asyncio.Future[None] | None: ...

    def spent(self, seconds: float) -> None: ...


class EventStream:
    """The response side of one channel over raw ASGI.

    Besides `write`, a channel's live events can go out with `write_now`, from the feed
    reader's task rather than the channel's own: one event to a thousand listeners then
    costs a thousand writes, not a thousand task wake-ups as well. A server's `send`
    completes without suspending unless the client is slow (its buffer full); one that
    suspends is `pending`, finished by callbacks on what it waits for (no task of its own:
    with hundreds of slow clients, a task and its wait per suspended write were most of
    what the garbage collector walked), and the next `write` (and `settle`) awaits it
    first, so the messages keep their order and its error is raised.
    """

    def __init__(self, send: Send, pacing: Pacing | None = None) -> None:
        self.send = send
        self.pacing = pacing
        """Shares the loop's turns: a suspended write resumes in its turn. Hundreds of slow
        clients drain in one poll of the loop; their writes, each up to `WRITE_BYTES`, run
        in one turn would hold every request that came meanwhile."""
        self._turn_taken = False
        self.started = False
        self._step: Any = None
        """A `write_now`'s `send` that suspended: the coroutine, resumed by `_resume`."""
        self._waiting_on: Any = None
        """What it waits for: a future (a callback on it) or the loop's next turn (a handle)."""
        self._failed: BaseException | None = None
        """Its error, raised by `settle`."""
        self._settled: asyncio.Future[None] | None = None
        """Made by a `settle` that waits for it, done when it ends."""
        self.on_done: Callable[[bool], None] | None = None
        """Called when a suspended write ends and no `settle` waits for it (True: it failed,
        its error kept for `settle`): its channel's task need not wait on it."""

    @property
    def pending(self) -> bool:
        """A `write_now` suspended: nothing may be written before it is settled."""
        return self._step is not None or self._failed is not None

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
        """Write `body` at once, from any task; False when the send suspended (it is
        `pending`: nothing may be written before it is settled)."""
        step: Any = self.send({"type": "http.response.body", "body": body, "more_body": True})
        try:
            waiting_on = step.send(None)
        except StopIteration:
            return True
        except Exception as exc:  # noqa: BLE001  raised by the channel's task, in `settle`
            self._failed = exc
            return False
        self._step = step
        self._wait_on(waiting_on)
        return False

    def _wait_on(self, waiting_on: Any) -> None:
        """Resume the suspended send once `waiting_on` is done, as a task would."""
        if asyncio.isfuture(waiting_on):
            self._waiting_on = waiting_on
            waiting_on.add_done_callback(self._resume)
        else:  # a bare yield: it asked for a turn of the loop
            self._waiting_on = asyncio.get_running_loop().call_soon(self._resume, None)

    def _resume(self, _done: Any) -> None:
        self._waiting_on = None
        pacing = self.pacing
        if pacing is not None and not self._turn_taken:
            turn = pacing.turn_now()
            if turn is not None:  # after the loop's other work: when its turn comes
                self._turn_taken = True
                self._waiting_on = turn
                turn.add_done_callback(self._resume)
                return
        self._turn_taken = False
        t0 = time.perf_counter()
        try:
            waiting_on = self._step.send(None)
        except StopIteration:
            self._ended(None)
        except asyncio.CancelledError:  # what it waited on was cancelled: the write failed
            self._ended(ConnectionAbortedError("the write to the client was cancelled"))
        except Exception as exc:  # noqa: BLE001  raised by the channel's task, in `settle`
            self._ended(exc)
        else:
            self._wait_on(waiting_on)
        if pacing is not None:
            pacing.spent(time.perf_counter() - t0)

    def _ended(self, failed: BaseException | None) -> None:
        self._step = None
        self._failed = failed
        settled, self._settled = self._settled, None
        if settled is not None and not settled.done():
            settled.set_result(None)
        elif self.on_done is not None:
            self.on_done(failed is not None)

    @property
    def writing(self) -> bool:
        """A `write_now` suspended and goes on (its end calls `on_done`)."""
        return self._step is not None

    async def settle(self) -> None:
        """Await a `write_now` that suspended; raise its error."""
        if self._step is not None:
            settled = self._settled
            if settled is None or settled.done():  # none, or one a cancelled settle left
                settled = self._settled = asyncio.get_running_loop().create_future()
            await settled
        self.check()

    def check(self) -> None:
        """Raise the error of a `write_now` that ended in one (once), without waiting."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def abandon(self) -> None:
        """The channel ended: a `write_now` still pending is stopped (its error dropped)."""
        step, waiting_on = self._step, self._waiting_on
        self._step = self._waiting_on = self._failed = None
        self._turn_taken = False
        if waiting_on is not None:
            if asyncio.isfuture(waiting_on):
                waiting_on.remove_done_callback(self._resume)
            waiting_on.cancel()  # the future it waits for, as a task's cancel does; or the turn
        if step is not None:
            # Stopped as a task's cancel stops it: CancelledError where it waits.
            try:
                step.throw(asyncio.CancelledError())
            except BaseException:  # noqa: BLE001, S110  the cancel, or what it ended with: dropped
                pass
            else:
                step.close()
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.cancel()


async def watch_disconnect(receive: Receive, task: asyncio.Task[Any] | None) -> bool:
    """Cancel the channel's task when the client goes away (uvicorn's `send` does not raise)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if task is not None:
                task.cancel()
            return True
