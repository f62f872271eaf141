"""A master that Redis Sentinel watches: its client, a plain `Redis` (an `ArqRedis` with
`arq`) on redis-py's `SentinelConnectionPool` with the policy of every majordomus client on
the master's connections. Each new connection asks the sentinels where the master is, so
after a failover the commands that broke on the old master are retried on the promoted
replica, and until the sentinels name one a command fails as `UNREACHABLE`; while in use
the client asks them again every `MASTER_RECHECK_SECONDS`, so a master that lives on
through a failover soon stops getting its writes. What it does not do: read from replicas
(`slave_for`), speak TLS to the sentinels, or save a write that a dying master took and had
not passed to its replica yet (replication is asynchronous; `min-replicas-to-write` on the
servers bounds that loss).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.store.connection import STURDY, SturdyConnection
from majordomus.store.policy import WAIT_FOR_CONNECTION_SECONDS, keepalive_options, retry_policy
from majordomus.store.urls import not_a_redis_url, sentinel_parts


class _SentinelTcpConnection(SturdyConnection, SentinelManagedConnection):
    """A connection to the master the sentinels name (asked again at each connect, so a
    connection that broke on the old master opens on the new one) with ``SturdyConnection`'s
    writes, handshake and packing; a master demoted to a replica (READONLY) is a broken
    connection, as redis-py's `SentinelManagedConnection` has it."""


class _SentinelTlsConnection(SturdyConnection, SentinelManagedSSLConnection):
    pass


SENTINEL_MANAGED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _SentinelTcpConnection,
    SSLConnection: _SentinelTlsConnection,
}
"""redis-py's connection class for the master's scheme, and ours on a Sentinel URL."""


MASTER_RECHECK_SECONDS = 1.0
"""How often a Sentinel client in use asks the sentinels again where the master is. A
master that dies breaks its connections, which open again on the one the sentinels name
next; but a master that lives on through a failover (`SENTINEL FAILOVER`, a healed
partition) keeps its clients, and takes writes the new master never sees, until the
sentinels make it a replica and it drops them (10 s later in Redis 7). Asked again, the
client moves each connection to the new master as it hands it out, so its writes go there
within about this long of the sentinels naming it. A subscription, which holds its
connection, stays on the old master until that drops it."""


class NotASentinel(ResponseError):
    """A host of a Sentinel URL answered, but not as a sentinel (it refused `SENTINEL
    MASTERS`: a plain Redis, say): the URL is wrong, and no retry will mend it."""


class _SentinelPool(SentinelConnectionPool):
    """redis-py's pool of the master's connections, which asks the sentinels again while in
    use (`MASTER_RECHECK_SECONDS`) and drops a connection to a master they no longer name
    as it hands it out, closes its connections to the sentinels when it closes, and says
    so when a host asked is no sentinel."""

    _asked_at = -MASTER_RECHECK_SECONDS
    _asking: asyncio.Task[None] | None = None

    async def get_master_address(self) -> Any:
        try:
            return await super().get_master_address()
        except ResponseError as exc:
            raise NotASentinel(f"a host of the URL is no sentinel ({exc})") from exc

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        self._ask_again_when_due()
        named = self.master_address
        where = (getattr(connection, "host", None), getattr(connection, "port", None))
        if named is not None and connection.is_connected and where != named:
            await connection.disconnect()  # opens again on the master named now
        await super().ensure_connection(connection)

    def _ask_again_when_due(self) -> None:
        now = time.monotonic()
        if now - self._asked_at < MASTER_RECHECK_SECONDS:
            return
        if self._asking is not None and not self._asking.done():
            return
        self._asked_at = now
        self._asking = asyncio.get_running_loop().create_task(self._ask_again())

    async def _ask_again(self) -> None:
        # A new master closes the idle connections (redis-py's `get_master_address`); no
        # answer leaves the connections as they are, and their commands say if it is gone.
        with contextlib.suppress(Exception):
            await self.get_master_address()

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if not inuse_connections:  # a new master: the idle connections only
            return
        asking = self._asking  # the client closing: the sentinels' connections too
        if asking is not None and not asking.done():
            asking.cancel()
            await asyncio.wait([asking])
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.connection_pool.disconnect()


class _WaitingSentinelPool(_SentinelPool, BlockingConnectionPool):
    """`_SentinelPool` whose caller past the bound waits, as a `BlockingConnectionPool`'s."""


def sentinel_client(
    url: str,
    *,
    arq: bool,
    max_connections: int,
    wait: bool,
    name: str | None,
    connect_timeout: float,
    socket_timeout: float,
) -> Any:
    """`connect` on a Sentinel URL: the master's client, with the same policy. A sentinel
    is asked with the connect timeout for its answer too, and no retry (the next sentinel
    is the retry; the master's connection retries the whole search). Only a new master
    connection asks, so a sentinel holds no more of the client's connections than the
    master's bound."""
    try:
        sentinels, service, url_options, sentinel_credentials = sentinel_parts(url)
    except (ValueError, KeyError) as exc:
        raise not_a_redis_url(url, exc) from None
    theirs = url_options.pop("connection_class", Connection)
    keepalive = {"socket_keepalive": True, "socket_keepalive_options": keepalive_options()}
    manager = Sentinel(
        sentinels,
        sentinel_kwargs={
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": connect_timeout,
            **keepalive,
            **sentinel_credentials,
        },
    )
    for sentinel in manager.sentinels:
        sentinel.connection_pool.connection_class = STURDY[Connection]
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        **keepalive,
        "retry": retry_policy(),
        "retry_on_error": [_ConnectionError, _TimeoutError],
        "connection_class": SENTINEL_MANAGED[theirs],
    }
    if wait:
        options["timeout"] = WAIT_FOR_CONNECTION_SECONDS
    if name is not None:
        options["client_name"] = name
    options.update(url_options)  # the URL's query wins, as in `from_url`
    redis_class: type[Redis] = Redis
    if arq:
        from arq.connections import ArqRedis

        redis_class = ArqRedis
    client = manager.master_for(
        service,
        redis_class=redis_class,
        connection_pool_class=_WaitingSentinelPool if wait else _SentinelPool,
        **options,
    )
    try:  # the options, checked now rather than at the first command (no I/O)
        client.connection_pool.make_connection()
    except (TypeError, ValueError) as exc:  # an option a connection has not
        raise not_a_redis_url(url, exc) from None
    return client
