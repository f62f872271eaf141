"""Every private name of redis-py (5.3) and of asyncio's streams that majordomus reads or
sets, in one place: the rest of the code calls these functions, never the names.

Each use says why the public API does not do, and each has a test in
tests/majordomus/test_redis_internals.py that fails when the library changes under it
(the name gone, or its meaning changed), so an upgrade of redis-py is checked here, not
found in production.

- A connection's socket: `Connection._connect` (open the socket alone, without the
  handshake: `SturdyConnection` retries the handshake itself, which `connect()` cannot do),
  `Connection._error_message` (redis-py's wording of a failed connect, kept for the
  errors operators grep), `Connection._writer` (`SturdyConnection`'s write keeps the caller's
  cancel: it must write to the stream itself, as redis-py's own `send_packed_command`).
- A connection's buffers: `Connection._reader._buffer` (asyncio's `StreamReader`) and
  `Connection._parser._reader.has_data()` (hiredis' reader): nothing received and not
  read, so a pooled connection is handed out without redis-py's read of it, which costs
  a turn of the event loop on every command (`heard_nothing`).
- A blocking pool's free list: `BlockingConnectionPool._condition` (and its asyncio
  `Condition._waiters`), `_available_connections`, `_in_use_connections`: a free
  connection is taken without the lock and the timer when nobody waits
  (`take_free_connection`); the public `get_connection` always takes both.
- A cluster client's layout: `RedisCluster._initialize` (a new layout is due) and
  `RedisCluster._lock` (held while one is asked); redis-py has no public way to ask for a
  new layout without closing every node, which is what `SturdyCluster` avoids.
- A cluster pipeline's queue: `ClusterPipeline._command_stack` and `_client`: sending the
  same commands again after a shard lacked a script (redis-py's `execute` empties it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, RedisCluster
from redis.asyncio.cluster import ClusterPipeline
from redis.asyncio.connection import AbstractConnection


def open_socket(connection: AbstractConnection) -> Awaitable[None]:
    """Open the connection's socket, without its handshake (`AUTH`, `SELECT`...)."""
    return cast(Awaitable[None], connection._connect())  # noqa: SLF001


def connect_error_message(connection: AbstractConnection, exc: BaseException) -> str:
    """redis-py's words for a connect that failed with `exc`."""
    return cast(str, connection._error_message(exc))  # noqa: SLF001


def stream_writer(connection: AbstractConnection) -> asyncio.StreamWriter:
    """The connected connection's stream writer."""
    return cast(asyncio.StreamWriter, connection._writer)  # noqa: SLF001


def heard_nothing(connection: Any) -> bool:
    """Whether a connection is surely ready for a command, by what the event loop has
    already received: connected, not closed by the server, and holding no unread byte in
    the stream's or hiredis' buffers. Anything unknown (another parser, another asyncio)
    answers False: the caller then checks the way redis-py does."""
    if not connection.is_connected:
        return False
    stream = connection._reader  # noqa: SLF001
    buffered = getattr(stream, "_buffer", None)
    reader = getattr(connection._parser, "_reader", None)  # noqa: SLF001
    has_data = getattr(reader, "has_data", None)
    return (
        buffered is not None
        and not buffered
        and not stream.at_eof()
        and has_data is not None
        and not has_data()
    )


def take_free_connection(pool: BlockingConnectionPool) -> AbstractConnection | None:
    """A free connection of the pool, marked in use, when nobody waits for one and nobody
    holds the pool's lock; else None (the caller takes redis-py's way). A waiter, woken by
    a release, keeps the connection that woke it."""
    condition = pool._condition  # noqa: SLF001
    waiting = getattr(condition, "_waiters", None)
    free = pool._available_connections  # noqa: SLF001
    if waiting is None or waiting or not free or condition.locked():
        return None
    connection = free.pop()
    pool._in_use_connections.add(connection)  # noqa: SLF001
    return connection


def layout_due(cluster: RedisCluster) -> bool:
    """Whether the cluster client asks for the layout before its next command (new, closed,
    or told to)."""
    return bool(cluster._initialize)  # noqa: SLF001


def ask_layout_again(cluster: RedisCluster) -> None:
    """Have the cluster client ask for the layout before its next command, closing
    nothing."""
    cluster._initialize = True  # noqa: SLF001


def layout_lock(cluster: RedisCluster) -> asyncio.Lock:
    """The lock the cluster client holds while it asks for the layout (made on first use,
    as redis-py does)."""
    if not cluster._lock:  # noqa: SLF001
        cluster._lock = asyncio.Lock()  # noqa: SLF001
    return cast(asyncio.Lock, cluster._lock)  # noqa: SLF001


def queued_commands(pipeline: ClusterPipeline) -> list[Any]:
    """The commands queued in a cluster pipeline (a copy)."""
    return list(pipeline._command_stack)  # noqa: SLF001


def queue_again(pipeline: ClusterPipeline, commands: list[Any]) -> None:
    """Queue `commands` (from `queued_commands`) in the pipeline again."""
    pipeline._command_stack = list(commands)  # noqa: SLF001


def pipeline_cluster(pipeline: ClusterPipeline) -> RedisCluster:
    """The cluster client a pipeline sends through."""
    return cast(RedisCluster, pipeline._client)  # noqa: SLF001
