"""`majordomus serve`'s live delivery process: the live channel over connections the API
hands it (`api.live.apart` says why and how).

`Delivery` runs the same `LiveChannel` as the API, behind the same access log, on a feed
reader of its own; `Wire` is one handed connection: ASGI's `receive` and `send` for its one
request, the response written as HTTP/1.1 with `Connection: close`, the connection ended for
both processes when the channel ends. Started by `Handoff.start` as
`python -m majordomus.api.live.delivery FD`, FD its end of the Unix socket to the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from majordomus.api.access_log import with_access_log
from majordomus.api.launch import run_on
from majordomus.api.live.apart import (
    MESSAGE_BYTES,
    READY,
    STOP_SECONDS,
    HandedScope,
    decode_scope,
    end_connection,
)
from majordomus.api.live.channel import LiveChannel
from majordomus.api.live.feed import FeedHub
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.event_loop import choose
from majordomus.logs import configure_from
from majordomus.loops import within
from majordomus.registry import Registry
from majordomus.store.connect import api_client

log = logging.getLogger("majordomus.live.delivery")

NICENESS = 10
"""What the delivery process adds to its niceness.

On Linux it runs under `SCHED_IDLE`: the kernel runs it only on a core nothing else wants,
and takes the core back the moment the API, a worker or Redis wakes (under a mere niceness
a woken task could still wait out the delivery's slice: the 500 slow listeners' start p99
ratio was 1.87x, 2.46x, 2.41x niced against 1.78x, 1.50x, 1.09x idle, `bench/audience.py`).
On a machine with no core to spare, listeners fall behind and are told exactly what they
missed (`stream.lagged`); the work does not wait. `MAJORDOMUS_LIVE_IDLE=0` keeps the
niceness alone (listeners keep a share of a busy machine), `MAJORDOMUS_LIVE_APART=0` gives
delivery the API's own priority."""
WRITE_HIGH_WATER = 64 * 1024
"""A connection's send waits (the client is slow) past this much unsent: as uvicorn's."""
REDIS_CONNECTIONS = 16
"""The delivery process's Redis pool: its feed reader and the scoped channels' catch-up."""


class Wire(asyncio.Protocol):
    """One handed connection in the delivery process: ASGI `receive`/`send` for its one
    request, the response written as HTTP/1.1 with `Connection: close` (chunked, unless the
    response gives its length), the connection ended (for both processes) when it is done."""

    def __init__(self, sock: socket.socket, http_version: str) -> None:
        self.sock = sock
        self.chunked_ok = http_version == "1.1"
        self.transport: Any = None  # uvloop's is not asyncio's class
        self.gone = asyncio.get_running_loop().create_future()
        self._drained: asyncio.Future[None] | None = None
        self._requested = False
        self._chunked = False
        self._ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        """A client says nothing past its request (a pipelined one is not answered)."""

    def eof_received(self) -> bool:
        self._lost()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()

    def _lost(self) -> None:
        if not self.gone.done():
            self.gone.set_result(None)
        self._wake()
        end_connection(self.sock)  # the API's copy reads the end too

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake()

    def _wake(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def receive(self) -> Any:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.shield(self.gone)
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        transport = self.transport
        if transport is None or self.gone.done() or self._ended:
            return  # as uvicorn's send after a disconnect: nothing, no error
        drained = self._drained
        if drained is not None:
            await drained
            if self.gone.done():
                return
        kind = message["type"]
        if kind == "http.response.start":
            transport.write(self._head(message))
        elif kind == "http.response.body":
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if self._chunked:
                if body:  # the body itself is not copied into a chunk
                    transport.writelines((b"%x\r\n" % len(body), body, b"\r\n"))
                if not more:
                    transport.write(b"0\r\n\r\n")
            elif body:
                transport.write(body)
            if not more:
                self.end()

    def _head(self, message: Any) -> bytes:
        status = int(message["status"])
        headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", [])]
        sized = any(k == b"content-length" for k, _ in headers) or status in (204, 304)
        self._chunked = self.chunked_ok and not sized
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        lines = [f"HTTP/1.1 {status} {phrase}".encode("latin-1")]
        lines += [
            k + b": " + v for k, v in headers if k not in (b"connection", b"transfer-encoding")
        ]
        lines.append(b"date: " + email.utils.formatdate(usegmt=True).encode())
        if self._chunked:
            lines.append(b"transfer-encoding: chunked")
        lines.append(b"connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def end(self) -> None:
        """The response is done (or dropped): close once what is written is flushed."""
        self._ended = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self._ended = True
        if self.transport is not None:
            self.transport.abort()
        self._lost()


class Delivery:
    """The delivery process: the live channel (`LiveChannel`, behind the access log) on a
    feed reader of its own, over connections the API hands it."""

    def __init__(self, settings: Settings, link: socket.socket) -> None:
        self.settings = settings
        self.link = link
        # The channel reads executions and the feed only: no capability is imported here.
        name = f"majordomus-live:{socket.gethostname()}:{os.getpid()}"
        redis = api_client(settings.redis_url, REDIS_CONNECTIONS, name)
        self.engine = Engine(redis, Registry(), settings)
        self.hub = FeedHub(self.engine, settings)
        self.engine.follow = self.hub.read_after
        self.app = with_access_log(LiveChannel(self.engine, self.hub, settings), settings)
        self.wires: set[Wire] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.link.setblocking(False)
        loop.add_reader(self.link.fileno(), self._take)
        loop.add_signal_handler(signal.SIGTERM, self.stopped.set)
        await self.hub.start()  # its reader reads while a channel is open (`FeedHub`)
        self.link.send(READY)
        try:
            await self.stopped.wait()
        finally:
            loop.remove_reader(self.link.fileno())
            await self._stop()

    def _take(self) -> None:
        try:
            message, fds, _flags, _address = socket.recv_fds(self.link, MESSAGE_BYTES, 1)
        except BlockingIOError:
            return
        except OSError:
            message, fds = b"", []
        if not message:  # the API is gone
            for fd in fds:
                os.close(fd)
            self.stopped.set()
            return
        if not fds:
            return
        sock = socket.socket(fileno=fds[0])
        try:
            handed = decode_scope(message)
        except msgspec.DecodeError:
            end_connection(sock)
            sock.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(sock, handed))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, sock: socket.socket, handed: HandedScope) -> None:
        loop = asyncio.get_running_loop()
        # The loop's transport owns `sock`; a duplicate of our own ends the connection for
        # both processes when it is done (closing ours alone would not: the API holds one).
        own = socket.socket(fileno=os.dup(sock.fileno()))
        wire = Wire(own, handed.http_version)
        try:
            sock.setblocking(False)
            await loop.connect_accepted_socket(lambda: wire, sock=sock)
        except OSError:
            end_connection(own)
            own.close()
            return
        self.wires.add(wire)
        try:
            await self.app(handed.scope(), wire.receive, wire.send)
        except Exception:  # noqa: BLE001  the channel answers its own errors; this is a bug
            log.exception("live delivery: a channel failed")
        finally:
            wire.end()  # what is written goes, bounded: a client that reads nothing is dropped
            if not await within(STOP_SECONDS, asyncio.shield(wire.gone)):
                wire.abort()
            self.wires.discard(wire)
            own.close()

    async def _stop(self) -> None:
        self.hub.close_all("server stopping")
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=STOP_SECONDS)
        for wire in list(self.wires):
            wire.abort()
        for task in list(self.tasks):
            task.cancel()
        await within(STOP_SECONDS, self.hub.stop())
        with contextlib.suppress(Exception):
            await self.engine.aclose()


AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_NICENESS = 19
"""The niceness of the delivery process's own scheduling group, where Linux groups tasks
by session (`sched_autogroup_enabled`, the default of Debian's and Ubuntu's kernels)."""


def lower_priority(idle_policy: bool) -> None:
    """Run after everything else on the machine: `NICENESS` added and, where the kernel has
    them and `idle_policy` (`MAJORDOMUS_LIVE_IDLE`) asks for them, `SCHED_IDLE` and a
    session of its own whose scheduling group has the lowest weight.

    Linux shares the cores between sessions' groups first and between a group's tasks
    after: under `serve`'s session the delivery process, however idle its policy, made
    `serve`'s whole group compete with Redis's at full weight while it wrote. In a group of
    its own at niceness 19 it weighs 15 against their 1,024 (the 500 slow listeners' start
    p99 ratio, alternating: 1.54x, 1.00x, 0.93x, 1.13x against 1.64x, 1.28x, 3.34x, 0.89x
    in `serve`'s group). The session changes nothing else: it ignores the terminal's
    Ctrl-C already and ends with its link to the API."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    if not idle_policy:
        return
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is not None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, idle, os.sched_param(0))
    if AUTOGROUP.exists():
        with contextlib.suppress(OSError):
            os.setsid()
            AUTOGROUP.write_text(str(AUTOGROUP_NICENESS))


def _settings_from(link: socket.socket) -> Settings:
    return msgspec.json.decode(link.recv(MESSAGE_BYTES), type=Settings)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    link = socket.socket(fileno=int(args[0]))
    settings = _settings_from(link)
    configure_from(settings)
    lower_priority(settings.live_idle)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is serve's to give
    run_on(choose(settings.fast_loop), Delivery(settings, link).run())


if __name__ == "__main__":
    main()
