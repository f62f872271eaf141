"""The connection and the pools of every majordomus client: redis-py's, with the gaps of
redis-py 5.3 closed that cost a process its cancels, its retries or its latency (see
`SturdyConnection` and `_QuickPool`). `STURDY` and `QUICK_POOLS` name ours in place of
redis-py's; the private names they touch are read through
`majordomus.store.redis_internals`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.store.policy import blocking_read_timeout
from majordomus.store.redis_internals import (
    connect_error_message,
    heard_nothing,
    open_socket,
    stream_writer,
    take_free_connection,
)

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # redis-py's own packer, in Python
    _hiredis_pack = None


class SturdyConnection(AbstractConnection):
    """redis-py's connection, with two gaps of redis-py 5.3 closed, and hiredis's packer.

    - Writes keep the caller's cancel. redis-py bounds each write with `asyncio.wait_for`,
      which on Python 3.11 returns the result of a write that completed as the cancel
      landed and drops the cancel (fixed in 3.12): a loop stopped mid-command then goes on
      as if nothing had been asked, and a process waits on it for ever. `send_packed_command`
      is redis-py's (5.3.1, fingerprinted in tests/majordomus/test_connect.py) with the write
      bounded by `asyncio.timeout`, which keeps the cancel.
    - The handshake of a new connection (`CLIENT SETNAME`, `SELECT`, `AUTH`) is retried like
      a command. redis-py retries the socket's connect and the command, but a connection
      that breaks during its handshake (a server restarting, a lost answer) failed the
      command it was opened for at once, outside every retry.
    - A write to a transport the peer closed is a `ConnectionError` on uvloop too (uvloop
      raises `RuntimeError` there), so it is retried and counted as Redis away, never
      taken for a refusal of the command.
    - A write the socket takes whole sets no timer: only a write left waiting for room in
      the socket is bounded by the socket timeout.
    - Commands are packed by hiredis where it is installed (redis-py's asyncio connection
      packs in Python even then, about 7 us an argument: a third of a start's client time
      with its 36 script arguments), to the same bytes; anything hiredis will not pack
      (None, a memoryview of another kind) is left to redis-py's packer, which says why.
    """

    if _hiredis_pack is not None:

        def pack_command(self, *args: Any) -> list[bytes]:
            first = args[0]
            if isinstance(first, str):
                args = (*first.encode().split(), *args[1:])
            elif b" " in first:
                args = (*first.split(), *args[1:])
            try:
                return [_hiredis_pack(args)]
            except TypeError:
                return super().pack_command(*args)

    async def on_connect(self) -> None:
        await self.retry.call_with_retry(self._handshake, lambda _: self.disconnect())

    async def read_response(  # type: ignore[override]
        self, disable_decoding: bool = False, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """redis-py's, with the read timeout of a blocking read (`blocking_reads`) where the
        caller set one."""
        if timeout is None:
            timeout = blocking_read_timeout()
        return await super().read_response(disable_decoding, timeout, **kwargs)

    async def _handshake(self) -> None:
        if not self.is_connected:  # the last try's connection broke: a new one
            try:
                await open_socket(self)
            except (TimeoutError, OSError) as exc:  # as redis-py's `connect` words them
                raise (
                    _TimeoutError("Timeout connecting to server")
                    if isinstance(exc, TimeoutError)
                    else _ConnectionError(connect_error_message(self, exc))
                ) from exc
        await super().on_connect()

    async def send_packed_command(
        self, command: str | bytes | Iterable[bytes], check_health: bool = True
    ) -> None:
        if not self.is_connected:
            await self.connect()
        elif check_health:
            await self.check_health()
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            writer = stream_writer(self)  # connected above
            writer.writelines(command)
            if writer.transport.get_write_buffer_size():
                # The socket took only part: the rest waits for room, bounded.
                async with asyncio.timeout(self.socket_timeout or None):
                    await writer.drain()
            else:
                # All in the kernel: the drain cannot wait (it only raises a connection
                # lost meanwhile), so it needs no timer (tens of microseconds on every
                # command's path after an idle moment).
                await writer.drain()
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise _TimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            err_no, errmsg = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else e.args[:2]
            raise _ConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from e
        except RuntimeError as e:
            # uvloop refuses a write to a transport the peer already closed with a
            # RuntimeError ("unable to perform operation on <TCPTransport closed=True>; the
            # handler is closed") where asyncio's raises an OSError: the same broken
            # connection, so the same retried ConnectionError, not a refusal of the command.
            await self.disconnect(nowait=True)
            if "closed" not in str(e):
                raise
            raise _ConnectionError(f"Error while writing to socket: {e}") from e
        except BaseException:
            # A write cut short leaves the connection in an unknown state: redis-py's rule.
            await self.disconnect(nowait=True)
            raise


class _TcpConnection(SturdyConnection, Connection):
    pass


class _TlsConnection(SturdyConnection, SSLConnection):
    pass


class _UnixConnection(SturdyConnection, UnixDomainSocketConnection):
    pass


class _QuickPool(ConnectionPool):
    """redis-py's pool, handing out a connection without a turn of the event loop.

    redis-py checks each connection it hands out by reading it with a zero timeout (data
    there means a command's answer was left unread, an empty read that the server closed
    it): a read that waits for the loop's next turn, on the critical path of every command
    (100-200 us of a start after an idle moment, measured). A connection the loop has
    already heard nothing on since its last answer (`heard_nothing`) is handed out at once; any
    other is checked as redis-py checks it. What the quick check cannot see, a close the
    loop has not yet read, fails the command's write or read as a broken connection, which
    the client's retry policy reconnects and sends again (the command never reached Redis).
    """

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        if heard_nothing(connection):
            return
        await super().ensure_connection(connection)


class _QuickBlockingPool(_QuickPool, BlockingConnectionPool):
    """redis-py's blocking pool with `_QuickPool`'s check, and a free connection taken
    without its lock and timer when nobody waits for one (a waiter, woken by a release,
    keeps the connection that woke it: the slow path serves it)."""

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        connection = take_free_connection(self)
        if connection is None:
            return await super().get_connection()
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection


QUICK_POOLS: dict[type[ConnectionPool], type[ConnectionPool]] = {
    ConnectionPool: _QuickPool,
    BlockingConnectionPool: _QuickBlockingPool,
}
"""redis-py's pool classes, and ours in their place."""


STURDY: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _TcpConnection,
    SSLConnection: _TlsConnection,
    UnixDomainSocketConnection: _UnixConnection,
}
"""redis-py's connection class for each URL scheme, and ours in its place."""
