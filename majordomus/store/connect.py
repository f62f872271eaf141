"""Connections to Redis: the one place a client is made, for every process alike.

`connect` builds the client of a worker, the CLI and MCP over stdio (an arq client for
workers, or a client of an in-process fakeredis server for `majordomus dev` on a machine
without `redis-server`); `api_client` is the API's; `check_reachable` is the start-up check
of the process commands. Every client has the same policy, named below: bounded connect
and read timeouts, TCP keepalive probes as the health check of idle connections, a
bounded pool that waits for a free connection, and a few quick retries of a command whose
connection broke (redis-py's `Retry`, exponential backoff with jitter). Those retries ride
through a blip (a reset connection, a restart); an outage longer than that reaches the
caller as `majordomus.store.failures.UNREACHABLE`, and what to do then is the caller's.

The read timeout is above the longest block any caller asks for (`LONGEST_BLOCK_SECONDS`),
so a blocking read (`XREAD BLOCK` of the feed reader and of `executions.wait`) is never cut
by it; the workers' pub/sub connection reads with timeouts of its own and pings
(`majordomus.store.signals`), since a plain `listen()` would wait on the socket timeout.
The embedded server itself is `majordomus.store.embedded`. Nothing else builds a client.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterable
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.config import shown_url
from majordomus.errors import MajordomusError, invalid_input, unavailable

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # redis-py's own packer, in Python
    _hiredis_pack = None

DEFAULT_URL = "redis://127.0.0.1:6379/0"

RedisClient = Redis
"""The client type every store class takes (an `ArqRedis` is one too)."""

WAIT_FOR_CONNECTION_SECONDS = 10
"""How long a caller of a waiting pool (`wait=True`) waits for a free connection; past it
the call fails with `ConnectionError("No connection available.")`."""

MAX_CONNECTIONS = 64
"""Connections one client's pool opens at most (the API passes its own bound)."""

CONNECT_TIMEOUT_SECONDS = 3.0
"""How long opening a connection may take before it counts as a failure."""

LONGEST_BLOCK_SECONDS = 5.0
"""The longest a caller blocks in one read (`api.live.feed.READ_BLOCK_MS`, the 5 s slices
of `Engine.wait`, the CLI's follow): the read timeout must stay above it."""

SOCKET_TIMEOUT_SECONDS = 10.0
"""How long a reply may take before the connection counts as broken: the longest block
(5 s) with room for a busy or briefly paused server."""

KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_PROBES = 3
"""The health check of a connection: TCP keepalive probes after 10 s idle, every 5 s, and
the kernel drops it after 3 unanswered (so about 25 s after its peer vanished without a
reset). redis-py's own `health_check_interval` (a PING before a command on an idle
connection) is left off: in redis-py 5.3 together with `Retry` it recurses without end
when a connection is accepted and then dropped during its handshake (redis/redis-py#3745,
#2866), which is what a flapping proxy or load balancer does. A broken connection is
found at the next command instead, and that command is retried on a new one."""

RETRIES = 3
"""How many times a command is sent again after its connection broke or timed out."""

RETRY_BACKOFF_BASE_SECONDS = 0.05
RETRY_BACKOFF_CAP_SECONDS = 1.0
"""Each retry waits a random time up to base * 2**attempt, at most the cap: at most about
1.4 s over three retries, a blip and not an outage."""


REACHABLE_PATIENCE_SECONDS = 5.0
"""How long the start-up check of `serve` and `worker` keeps asking a silent Redis before
the process stops with "unreachable"."""

REACHABLE_RETRY_SECONDS = 0.25
"""The pause between two asks of the start-up check."""


def retry_policy() -> Retry:
    """The retry of every client (a fresh one each: redis-py copies it per connection)."""
    backoff = ExponentialWithJitterBackoff(
        cap=RETRY_BACKOFF_CAP_SECONDS, base=RETRY_BACKOFF_BASE_SECONDS
    )
    return Retry(backoff, RETRIES, (_ConnectionError, _TimeoutError))


class _Sturdy(AbstractConnection):
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

    async def _handshake(self) -> None:
        if not self.is_connected:  # the last try's connection broke: a new one
            try:
                await self._connect()
            except (TimeoutError, OSError) as exc:  # as redis-py's `connect` words them
                raise (
                    _TimeoutError("Timeout connecting to server")
                    if isinstance(exc, TimeoutError)
                    else _ConnectionError(self._error_message(exc))
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
            async with asyncio.timeout(self.socket_timeout or None):
                await self._send_packed_command(command)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise _TimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            err_no, errmsg = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else e.args[:2]
            raise _ConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from e
        except BaseException:
            # A write cut short leaves the connection in an unknown state: redis-py's rule.
            await self.disconnect(nowait=True)
            raise


class _TcpConnection(_Sturdy, Connection):
    pass


class _TlsConnection(_Sturdy, SSLConnection):
    pass


class _UnixConnection(_Sturdy, UnixDomainSocketConnection):
    pass


STURDY: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _TcpConnection,
    SSLConnection: _TlsConnection,
    UnixDomainSocketConnection: _UnixConnection,
}
"""redis-py's connection class for each URL scheme, and ours in its place."""


def _keepalive_options() -> dict[int, int]:
    """The keepalive timings, where the platform names them (Linux does; macOS has some)."""
    wanted = {
        "TCP_KEEPIDLE": KEEPALIVE_IDLE_SECONDS,
        "TCP_KEEPINTVL": KEEPALIVE_INTERVAL_SECONDS,
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def connect(
    url: str | None,
    *,
    arq: bool = False,
    max_connections: int = MAX_CONNECTIONS,
    wait: bool = True,
    name: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
    fake_server: Any = None,
) -> Any:
    """A client on `url` (or on `fake_server`, an in-process fakeredis server).

    With `arq`, an `ArqRedis` that can also enqueue and poll. The pool holds at most
    `max_connections`; with `wait` (the default) a caller past that waits up to
    `WAIT_FOR_CONNECTION_SECONDS` for a free one, without it the call fails at once.
    `name` is what `CLIENT LIST` shows. A URL that is not a Redis URL is `invalid_input`.
    """
    options: dict[str, Any] = {"max_connections": max_connections}
    if name is not None:
        options["client_name"] = name
    pool_class: type[ConnectionPool] = BlockingConnectionPool if wait else ConnectionPool
    if wait:
        options["timeout"] = WAIT_FOR_CONNECTION_SECONDS
    if fake_server is not None:
        from fakeredis.aioredis import FakeConnection

        pool = pool_class(connection_class=cast(Any, FakeConnection), server=fake_server, **options)
    else:
        options.update(
            socket_connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            retry=retry_policy(),
            retry_on_error=[_ConnectionError, _TimeoutError],
        )
        if not (url or DEFAULT_URL).startswith("unix:"):  # a unix socket has no keepalive
            options["socket_keepalive"] = True
            options["socket_keepalive_options"] = _keepalive_options()
        try:
            pool = pool_class.from_url(url or DEFAULT_URL, **options)
        except ValueError as exc:
            raise not_a_redis_url(url or DEFAULT_URL, exc) from None
        pool.connection_class = STURDY.get(pool.connection_class, pool.connection_class)
    if arq:
        from arq.connections import ArqRedis

        return ArqRedis(connection_pool=pool)
    return Redis(connection_pool=pool)


def api_client(url: str | None, max_connections: int, name: str) -> Any:
    """The API's one client: a pool of at most `max_connections` that waits for a free
    connection rather than opening another (so a thousand listeners hold a bounded number),
    each connection named `name` in `CLIENT LIST`."""
    return connect(url, wait=True, name=name, max_connections=max_connections)


def not_a_redis_url(url: str, exc: Exception) -> MajordomusError:
    return invalid_input(
        f"MAJORDOMUS_REDIS_URL {shown_url(url)!r} is not a Redis URL ({exc})",
        "use redis://host:port/db, rediss://… for TLS, or unix:///path/to/socket",
    )


def check_reachable(
    url: str | None, timeout: float = 3.0, patience: float = REACHABLE_PATIENCE_SECONDS
) -> None:
    """Raise `invalid_input` (not a Redis URL) or `unavailable` (no answer) before a process
    command starts serving on `url`; return quietly when Redis answers. A Redis that does
    not answer is asked again for up to `patience` seconds, so a blip at start-up (a
    restart, a failover, a dropped connection) does not stop the process."""

    async def ping() -> None:
        client = connect(url, connect_timeout=timeout, socket_timeout=timeout)
        deadline = time.monotonic() + patience
        try:
            while True:
                try:
                    await client.ping()
                    return
                except (_ConnectionError, _TimeoutError):
                    if time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(REACHABLE_RETRY_SECONDS)
        finally:
            await client.aclose()

    try:
        asyncio.run(ping())
    except MajordomusError:
        raise
    except Exception as exc:
        raise unavailable(
            f"Redis at {shown_url(url or DEFAULT_URL)} is unreachable ({exc})",
            "start Redis, or set MAJORDOMUS_REDIS_URL; `majordomus dev` runs on its own Redis",
        ) from None
