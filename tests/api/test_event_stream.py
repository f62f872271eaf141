"""`EventStream.write_now`: a send that suspends is finished by callbacks on what it waits
for, with no task of its own; `settle` waits for it and raises its error; `abandon` stops
it as a task's cancel would. The server's `send` here is a stand-in that suspends as
uvicorn's does for a slow client (on a future its flow control resolves), so each step is
seen; over a real socket the live channel tests (`test_live.py`, `test_audience.py`) run
the same code under uvicorn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.live.sse import EventStream


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
