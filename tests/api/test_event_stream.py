"""`EventStream.write_now`: a send that suspends is finished by callbacks on what it waits
for, with no task of its own; `settle` waits for it and raises its error; `abandon` stops
it as a task's cancel would. The server's `send` here is a stand-in that suspends as
uvicorn's does for a slow client (on a future its flow control resolves), so each step is
seen; over a real socket the live channel tests (`test_live.py`, `test_audience.py`) run
the same code under uvicorn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from majordomus.api.live.sse import EventStream
from tests.api.conftest import until


class SlowClient:
    """A `send` that writes at once, then waits for the client to drain (a future) and,
    after it, for one more turn of the loop (a bare yield), as a coroutine chain may."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.done: list[bytes] = []
        self.drained: asyncio.Future[None] | None = None
        self.stopped: list[str] = []
        self.fail: Exception | None = None

    async def send(self, message: dict[str, Any]) -> None:
        self.written.append(message.get("body", b""))
        self.drained = asyncio.get_running_loop().create_future()
        try:
            await self.drained
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.stopped.append("cancelled")
            raise
        if self.fail is not None:
            raise self.fail
        self.done.append(message.get("body", b""))

    def drain(self) -> None:
        assert self.drained is not None
        self.drained.set_result(None)


async def test_a_suspended_write_is_finished_without_a_task_and_settle_waits_for_it() -> None:
    client = SlowClient()
    stream = EventStream(client.send)
    tasks = len(asyncio.all_tasks())
    assert stream.write_now(b"one") is False
    assert stream.pending and client.written == [b"one"] and client.done == []
    assert len(asyncio.all_tasks()) == tasks  # no task of its own
    settling = asyncio.ensure_future(stream.settle())
    await asyncio.sleep(0)
    assert not settling.done()
    client.drain()
    await settling
    assert client.done == [b"one"] and not stream.pending
    # Settled on its own when nobody waits for it: the next write goes straight on.
    assert stream.write_now(b"two") is False
    client.drain()
    for _ in range(5):
        await asyncio.sleep(0)
    assert client.done == [b"one", b"two"] and not stream.pending
    await stream.settle()


async def test_the_error_of_a_suspended_write_is_raised_by_settle_once() -> None:
    client = SlowClient()
    stream = EventStream(client.send)
    client.fail = ConnectionResetError("gone")
    assert stream.write_now(b"one") is False
    client.drain()
    for _ in range(5):
        await asyncio.sleep(0)
    assert stream.pending  # ended, its error not yet raised
    with pytest.raises(ConnectionResetError, match="gone"):
        await stream.settle()
    assert not stream.pending
    await stream.settle()  # raised once


async def test_a_write_whose_wait_is_cancelled_from_outside_fails_and_raises_nothing_else() -> None:
    client = SlowClient()
    stream = EventStream(client.send)
    ended: list[bool] = []
    stream.on_done = ended.append
    stream.write_now(b"one")
    assert client.drained is not None
    client.drained.cancel()  # not by the stream: by what it waits on
    for _ in range(5):
        await asyncio.sleep(0)
    assert client.stopped == ["cancelled"] and ended == [True]
    with pytest.raises(ConnectionAbortedError):
        await stream.settle()


async def test_a_cancelled_settle_leaves_the_write_going_and_the_next_settle_waits_again() -> None:
    client = SlowClient()
    stream = EventStream(client.send)
    stream.write_now(b"one")
    settling = asyncio.ensure_future(stream.settle())
    await asyncio.sleep(0)
    settling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await settling
    assert stream.pending and client.stopped == []
    again = asyncio.ensure_future(stream.settle())
    await asyncio.sleep(0)
    assert not again.done()
    client.drain()
    await again
    assert client.done == [b"one"]


async def test_abandon_cancels_the_suspended_write_where_it_waits() -> None:
    client = SlowClient()
    stream = EventStream(client.send)
    stream.write_now(b"one")
    drained = client.drained
    stream.abandon()
    assert client.stopped == ["cancelled"] and not stream.pending
    assert drained is not None and drained.cancelled()  # awaited futures are cancelled with it
    await asyncio.sleep(0)
    assert client.done == []
    stream.abandon()  # twice is nothing


async def test_a_send_that_completes_at_once_is_written_now() -> None:
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["body"])

    stream = EventStream(send)
    assert stream.write_now(b"a") is True and stream.write_now(b"b") is True
    assert sent == [b"a", b"b"] and not stream.pending


# -- the channel over it: a slow client's channel sleeps while its write goes on ---------------


class PausingClient:
    """An ASGI `send` that, while `paused`, waits for the client to drain before writing, as
    uvicorn's does once its transport is past the high-water mark; what is written is kept."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.started = asyncio.Event()
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.sends = 0

    async def send(self, message: dict[str, Any]) -> None:
        self.sends += 1
        if self.paused:
            self.drained = asyncio.get_running_loop().create_future()
            await self.drained
        if message["type"] == "http.response.start":
            self.started.set()
        else:
            self.body += message.get("body", b"")

    def resume(self) -> None:
        self.paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def ids(self) -> list[str]:
        return [
            line[4:] for line in bytes(self.body).decode().splitlines() if line.startswith("id: ")
        ]


async def test_a_slow_clients_channel_is_parked_while_its_write_goes_on_and_fed_when_it_ends(
    redis: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from majordomus.api.live.channel import LiveChannel
    from majordomus.api.live.feed import FeedHub, Listener
    from majordomus.engine import LIVE_PATH, Engine
    from majordomus.registry import REGISTRY
    from tests.conftest import make_settings

    settings = make_settings(redis_url)
    engine = Engine(redis, REGISTRY, settings)
    feed = engine.store.keys.partitions[0].feed
    waits = 0
    plain_wait = Listener.wait

    async def counted_wait(self: Listener, timeout: float, busy: bool = False) -> bool:
        nonlocal waits
        waits += 1
        return await plain_wait(self, timeout, busy)

    monkeypatch.setattr(Listener, "wait", counted_wait)
    hub = FeedHub(engine, settings)
    await hub.start()
    client = PausingClient()
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "method": "GET",
        "path": LIVE_PATH,
        "query_string": b"",
        "headers": [(b"accept", b"text/event-stream")],
    }
    channel = asyncio.create_task(LiveChannel(engine, hub, settings)(scope, receive, client.send))
    written: list[str] = []

    async def add(n: int) -> None:
        for i in range(n):
            envelope = json.dumps({"type": "execution.log", "sequence": i + 1, "execution_id": "x"})
            written.append((await redis.xadd(feed, {"x": "x", "s": i + 1, "e": envelope})).decode())

    try:
        await asyncio.wait_for(client.started.wait(), 5)
        [listener] = hub.unscoped
        await until(lambda: listener.waiting, "the channel waits")
        await add(3)
        await until(lambda: client.ids() == written, "the first entries written")
        client.paused = True
        await add(3)
        await until(lambda: client.drained is not None, "a write suspended")
        sends, slept_at = client.sends, waits
        await until(lambda: listener not in hub.unparked and listener.waiting, "parked, waiting")
        await add(20)  # rounds go by: none visits it, none wakes its task
        await until(lambda: hub.backlog.head == len(written), "the hub has them all")
        await asyncio.sleep(0.05)
        assert client.sends == sends and listener not in hub.unparked
        client.resume()  # the write ends: the hub feeds the channel the rest
        await until(lambda: client.ids() == written, "every entry written, in order")
        assert waits == slept_at, "the channel's task was woken while its write went on"
        assert listener in hub.unparked
    finally:
        gone.set()
        await asyncio.wait_for(channel, 5)
        await hub.stop()
