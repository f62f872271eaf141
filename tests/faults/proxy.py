"""A TCP proxy the fault scenarios put between one process and its Redis (or its API).

`FaultProxy(port)` listens on a free loopback port and forwards every connection to
`127.0.0.1:port`. Its loop runs in a thread of its own, so a test drives it the same way
whether the test's code is sync or async, and a test that blocks for a while does not
stall the traffic it forwards. The faults:

- `cut()`: every open connection is reset now (both sides), as a lost network does;
- `refuse()`: a new connection is reset as soon as it is accepted, until `restore()`;
- `delay(seconds)`: each chunk is held `seconds` before it is passed on, in each direction
  (latency, not a bandwidth cap: chunks in flight overlap);
- `lose_answers(share)`: that share of the chunks coming back from the target is dropped,
  and the connection reset, after the request went through: the command was carried
  out and its answer lost, the fault a client that sends a command again must survive;
- `restore()`: no fault; connections made from now on pass.

A refused connection is accepted and reset rather than the port closed: the port stays
ours, so nothing else can take it between `refuse()` and `restore()`. The proxy knows
nothing of Redis or HTTP: it moves bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from typing import Any

CHUNK_BYTES = 65536
CALL_TIMEOUT_SECONDS = 5.0
"""How long a test waits for the proxy's loop to carry out an order."""


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", name: str = "") -> None:
        self.target = (target_host, target_port)
        self.name = name or f"proxy->{target_port}"
        self.refusing = False
        self.latency = 0.0
        self.answer_loss = 0.0
        self.answers_lost = 0
        """Answers dropped so far by `lose_answers`."""
        self._rng = random.Random()
        self.accepted = 0
        """Connections accepted so far (refused ones included)."""
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self._call(self._listen())

    @property
    def url(self) -> str:
        """The Redis URL of the proxied server, as a process under test is given it."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    # -- the faults, called from any thread ---------------------------------------------

    def cut(self) -> int:
        """Reset every open connection now; answers how many there were."""
        return self._call(self._cut())

    def refuse(self) -> None:
        """Reset each new connection at once, until `restore()`."""
        self.refusing = True

    def delay(self, seconds: float) -> None:
        """Hold each chunk `seconds` in each direction (connections open later too)."""
        self.latency = max(0.0, seconds)

    def lose_answers(self, share: float, seed: int | None = None) -> None:
        """Drop `share` of the answers coming back (and reset their connection)."""
        if seed is not None:
            self._rng.seed(seed)
        self.answer_loss = min(1.0, max(0.0, share))

    def restore(self) -> None:
        """No fault any more: new connections pass, without added latency or losses."""
        self.refusing = False
        self.latency = 0.0
        self.answer_loss = 0.0

    def outage(self) -> None:
        """Refuse, then cut: the process loses Redis and cannot reconnect until restored."""
        self.refuse()
        self.cut()

    def close(self) -> None:
        if not self._loop.is_running():
            return
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT_SECONDS)

    # -- the loop ---------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_SECONDS)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, sock=self._sock, backlog=512)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)  # the target is down: the client sees what it would see direct
            return
        if self.refusing:  # refused while we were connecting
            _reset(writer)
            _reset(up_writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer),
                self._pump(up_reader, writer, answers=True),
                return_exceptions=True,
            )
        finally:
            self._pairs.discard(pair)
            _reset(writer)
            _reset(up_writer)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool = False
    ) -> None:
        """Copy one direction; with latency, a sender task passes each chunk on when due.
        `answers`: this is the target's side, whose chunks `lose_answers` may drop."""
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send_when_due(held, writer))
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                if answers and self.answer_loss and self._rng.random() < self.answer_loss:
                    self.answers_lost += 1
                    break  # dropped: the finally resets the client's side
                await held.put((time.monotonic() + self.latency, data))
                if sender.done():
                    break
        finally:
            await held.put((0.0, b""))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sender, 30)
            _reset(writer)

    @staticmethod
    async def _send_when_due(
        held: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        while True:
            due, data = await held.get()
            if not data:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    async def _cut(self) -> int:
        pairs = list(self._pairs)
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)
        self._pairs.clear()
        return len(pairs)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close now, with a reset rather than a graceful FIN: the peer's next read fails."""
    transport = writer.transport
    if transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            # SO_LINGER 0: close() sends RST, as a lost peer (or a firewall) does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
