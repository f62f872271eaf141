"""Live delivery apart from request handling: `majordomus serve`'s delivery process.

An audience costs CPU: hundreds of unscoped listeners are tens of megabytes a second of
writes, and in the API's own event loop every start waited behind them. So `serve` (unless
`MAJORDOMUS_LIVE_APART=0`) runs a second process, at the lowest priority
(`delivery.lower_priority`), that serves the live channels. A request for `GET /events` is taken as always by the API (its
token, its Host, its admission: `api.access`, `LiveChannel._admit`); then, instead of
answering it, the API hands the connection's socket to the delivery process (`Handoff.hand`:
the descriptor over a Unix socket, `SCM_RIGHTS`, with the request's method, path, query and
headers) and waits, at no cost, for the connection to end. The delivery process runs the same
`LiveChannel` (and the same access log) on a feed reader of its own, writing the HTTP response
itself (`Wire`: `Connection: close`, chunked) and ending the connection when the channel ends.
What a listener receives is what the API would have sent; only where the bytes are made and
written changed, and the kernel now gives the work the cores first.

Where the socket cannot be handed (TLS, a Unix-socket listener, the delivery process down,
or not yet up), the API serves the channel itself, as before. When the delivery process dies,
the API ends the connections it held (their clients reconnect with their cursor, to the API
itself until a new delivery process, started a second later, is up). When `serve` stops, the
delivery process ends its channels with `stream.closing{"server stopping"}`, as the API does.

The API finds a request's socket by its peer address: `ConnectionBook.protocol` is uvicorn's
HTTP protocol class with `connection_made`/`connection_lost` (asyncio's `Protocol` methods)
recording each connection's transport, given to uvicorn as its `http` class.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import msgspec
from litestar.types import Scope

from majordomus.config import Settings

log = logging.getLogger("majordomus.live.apart")

RESTART_SECONDS = 1.0
"""How long after its death a new delivery process is started."""
STOP_SECONDS = 5.0
"""How long a stopping delivery process lets its channels end before it drops them."""
MESSAGE_BYTES = 256 * 1024
"""The largest handoff message (a request's scope; its headers are bounded well below)."""
READY = b"ready"


class HandedScope(msgspec.Struct, array_like=True):
    """What the delivery process needs of a request to run the channel on it."""

    method: str
    path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    client: tuple[str, int] | None
    server: tuple[str, int] | None
    http_version: str
    root_path: str

    def scope(self) -> Scope:
        return {  # type: ignore[typeddict-item, return-value]
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.http_version,
            "server": self.server,
            "client": self.client,
            "scheme": "http",
            "method": self.method,
            "root_path": self.root_path,
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": self.query_string,
            "headers": self.headers,
            "state": {},
        }


_encode = msgspec.msgpack.Encoder().encode
decode_scope = msgspec.msgpack.Decoder(HandedScope).decode


def _peer(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return (str(peer[0]), int(peer[1]))
    return None


# -- the API's side ---------------------------------------------------------------------------


class ConnectionBook:
    """The API's open connections by peer address, so a request's socket can be handed on."""

    def __init__(self) -> None:
        self.transports: dict[tuple[str, int], asyncio.BaseTransport] = {}

    def protocol(self, base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        """uvicorn's HTTP protocol class `base`, its connections recorded here."""
        book = self.transports

        class Booked(base):  # type: ignore[valid-type, misc]
            majordomus_booked: tuple[tuple[str, int], asyncio.BaseTransport] | None = None
            """Ours, not uvicorn's: the key and transport this connection is booked as."""

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                peer = _peer(transport)
                if peer is not None:
                    book[peer] = transport
                    self.majordomus_booked = (peer, transport)
                super().connection_made(transport)

            def connection_lost(self, exc: Exception | None) -> None:
                booked = self.majordomus_booked
                if booked is not None and book.get(booked[0]) is booked[1]:
                    del book[booked[0]]
                super().connection_lost(exc)

        Booked.__name__ = Booked.__qualname__ = f"Booked{base.__name__}"
        return Booked

    def socket_of(self, scope: Scope) -> socket.socket | None:
        """A duplicate of the plain-TCP socket `scope`'s request came on (None: none such)."""
        client = scope.get("client")
        transport = self.transports.get(tuple(client)) if client else None  # type: ignore[arg-type]
        if transport is None or transport.is_closing():
            return None
        if transport.get_extra_info("sslcontext") is not None:
            return None
        raw = transport.get_extra_info("socket")
        if raw is None or raw.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            return socket.socket(fileno=os.dup(raw.fileno()))
        except OSError:
            return None


class Handoff:
    """The API's end of the delivery process: starts it (again, when it dies), hands it live
    connections, and ends the connections it held when it dies."""

    def __init__(self, settings: Settings, book: ConnectionBook) -> None:
        self.settings = settings
        self.book = book
        self.process: subprocess.Popen[bytes] | None = None
        self.ready = False
        self.handed: set[socket.socket] = set()
        """Duplicates of the sockets handed over, to end them if the process dies."""
        self._link: socket.socket | None = None
        self._restart: asyncio.TimerHandle | None = None
        self._stopping = False

    def start(self) -> None:
        """Start the delivery process; it takes connections once it says it is ready."""
        if self._stopping:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(  # noqa: S603  our own interpreter and module
                [sys.executable, "-m", "majordomus.api.live.delivery", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            log.warning("live delivery: cannot start its process (%s); the API delivers", exc)
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        ours.send(msgspec.json.encode(self.settings))
        self._link = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._heard, ours)

    def _heard(self, link: socket.socket) -> None:
        try:
            said = link.recv(64)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        if said == READY:
            self.ready = True
            log.info("live delivery: process %d serves the live channels", self.pid)
            return
        if said:
            return
        self._lost(link)

    @property
    def pid(self) -> int:
        """The delivery process's, while it takes connections; 0 when the API delivers."""
        return self.process.pid if self.process is not None and self.ready else 0

    def _lost(self, link: socket.socket) -> None:
        """The process ended: the connections it held end (their clients reconnect)."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(link.fileno())
        link.close()
        if self._link is link:
            self._link = None
        self.ready = False
        process, self.process = self.process, None
        code = None
        if process is not None:
            code = process.poll()
            if code is None:  # alive without its link: of no use, and not waited for here
                process.kill()
                code = process.wait()
        for sock in list(self.handed):
            end_connection(sock)
        if self._stopping:
            return
        log.warning(
            "live delivery: its process ended (exit %s); %d channels it held were ended, "
            "and the API delivers until a new one is up",
            code,
            len(self.handed),
        )
        self._restart = loop.call_later(RESTART_SECONDS, self.start)

    @property
    def channels(self) -> int:
        """The channels handed over that are still open."""
        return len(self.handed)

    def hand(self, scope: Scope) -> socket.socket | None:
        """Hand the connection of `scope`'s request to the delivery process; its socket's
        duplicate when done (None: the API serves it itself)."""
        link = self._link
        if not self.ready or link is None:
            return None
        sock = self.book.socket_of(scope)
        if sock is None:
            return None
        message = _encode(
            HandedScope(
                str(scope.get("method", "GET")),
                str(scope.get("path", "")),
                bytes(scope.get("query_string", b"")),
                [(bytes(k), bytes(v)) for k, v in scope.get("headers", [])],
                _address(scope.get("client")),
                _address(scope.get("server")),
                str(scope.get("http_version", "1.1")),
                str(scope.get("root_path", "")),
            )
        )
        try:
            socket.send_fds(link, [message], [sock.fileno()])
        except OSError as exc:  # its queue is full (it is stuck) or it is gone
            sock.close()
            log.warning("live delivery: a connection could not be handed over (%s)", exc)
            return None
        self.handed.add(sock)
        return sock

    def release(self, sock: socket.socket) -> None:
        self.handed.discard(sock)
        sock.close()

    def close_all(self) -> None:
        """`serve` is stopping: the delivery process ends its channels and exits."""
        self._stopping = True
        if self._restart is not None:
            self._restart.cancel()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    async def stop(self) -> None:
        self.close_all()
        process = self.process
        if process is not None:
            deadline = time.monotonic() + STOP_SECONDS + 1
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if process.poll() is None:
                process.kill()
                process.wait()
        for sock in list(self.handed):
            end_connection(sock)
        link, self._link = self._link, None
        if link is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(link.fileno())
            link.close()


def _address(value: Any) -> tuple[str, int] | None:
    return (str(value[0]), int(value[1])) if value else None


def end_connection(sock: socket.socket) -> None:
    """End a connection whichever process holds it: both sides read its end."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
