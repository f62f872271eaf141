"""Connections to Redis: the one place a client is made, for every process alike.

`connect` builds the client of a worker, the CLI and MCP over stdio (a pool that waits for
a free connection or one that opens more, an arq client for workers, or a client of an
in-process fakeredis server for `majordomus dev` on a machine without `redis-server`);
`api_client` is the API's, a waiting pool with its timeouts; `check_reachable` is the
start-up check of the process commands. The embedded server itself is
`majordomus.store.embedded`. Nothing else builds a client.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis

from majordomus.config import shown_url
from majordomus.errors import MajordomusError, invalid_input, unavailable

DEFAULT_URL = "redis://127.0.0.1:6379/0"

RedisClient = Redis
"""The client type every store class takes (an `ArqRedis` is one too)."""

WAIT_FOR_CONNECTION_SECONDS = 10
"""How long a caller of a waiting pool (`wait=True`) waits for a free connection."""


def connect(
    url: str | None,
    *,
    arq: bool = False,
    max_connections: int = 64,
    wait: bool = False,
    name: str | None = None,
    connect_timeout: float | None = None,
    socket_timeout: float | None = None,
    fake_server: Any = None,
) -> Any:
    """A client on `url` (or on `fake_server`, an in-process fakeredis server).

    With `arq`, an `ArqRedis` that can also enqueue and poll; with `wait`, a pool of at
    most `max_connections` that waits for a free one rather than opening another (the
    API's, so a thousand listeners hold a bounded number); `name` is what `CLIENT LIST`
    shows. A URL that is not a Redis URL is `invalid_input`.
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
        if connect_timeout is not None:
            options["socket_connect_timeout"] = connect_timeout
        if socket_timeout is not None:
            options["socket_timeout"] = socket_timeout
        try:
            pool = pool_class.from_url(url or DEFAULT_URL, **options)
        except ValueError as exc:
            raise not_a_redis_url(url or DEFAULT_URL, exc) from None
    if arq:
        from arq.connections import ArqRedis

        return ArqRedis(connection_pool=pool)
    return Redis(connection_pool=pool)


def api_client(url: str | None, max_connections: int, name: str) -> Any:
    """The API's one client: a pool of at most `max_connections` that waits for a free
    connection rather than opening another, each connection named `name` in `CLIENT LIST`."""
    return connect(
        url,
        wait=True,
        name=name,
        connect_timeout=3,
        socket_timeout=15,
        max_connections=max_connections,
    )


def not_a_redis_url(url: str, exc: Exception) -> MajordomusError:
    return invalid_input(
        f"MAJORDOMUS_REDIS_URL {shown_url(url)!r} is not a Redis URL ({exc})",
        "use redis://host:port/db, rediss://… for TLS, or unix:///path/to/socket",
    )


def check_reachable(url: str | None, timeout: float = 3.0) -> None:
    """Raise `invalid_input` (not a Redis URL) or `unavailable` (no answer) before a process
    command starts serving on `url`; return quietly when Redis answers."""

    async def ping() -> None:
        client = connect(url, connect_timeout=timeout, socket_timeout=timeout)
        try:
            await client.ping()
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
