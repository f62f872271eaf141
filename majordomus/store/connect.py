"""Connections to Redis: the one place a client is made, for every process alike.

`connect` builds the client of a worker, the CLI and MCP over stdio (an arq client for
workers, or a client of an in-process fakeredis server for `majordomus dev` on a machine
without `redis-server`); `api_client` is the API's; `check_reachable` is the start-up check
of the process commands. Nothing else builds a client. What goes into one lives beside it,
a module a concept:

- `majordomus.store.policy`: the policy every client has (timeouts, keepalive, the bounded
  waiting pool, quick retries of a command whose connection broke, the API's shorter
  bounds). Those retries ride through a blip (a reset connection, a restart); an outage
  longer than that reaches the caller as `majordomus.store.failures.UNREACHABLE`, and what
  to do then is the caller's. The read timeout is above the longest block any caller asks
  for, so a blocking read is never cut by it; the workers' pub/sub connection reads with
  timeouts of its own and pings (`majordomus.store.signals`).
- `majordomus.store.urls`: what a URL names (one Redis, a cluster, a master through
  Sentinel) and the error of one that names none.
- `majordomus.store.connection`: the connection and pool classes, redis-py's with the gaps
  of redis-py 5.3 closed.
- `majordomus.store.cluster`: a Redis Cluster's client (`redis+cluster://host:port[,...]`,
  `rediss+cluster://` for TLS, database 0 only: seeds to ask for the layout, any one
  enough), and `pubsub_of`, a subscription on either kind of client.
- `majordomus.store.sentinel`: a master Redis Sentinel watches
  (`redis+sentinel://[user:password@]host:port[,...]/<service>[/<db>]`, the sentinels'
  own credentials in the query's `sentinel_password` and `sentinel_username`).
- `majordomus.store.redis_internals`: every private name of redis-py and asyncio's
  streams those modules touch, each with why and a test. The embedded server itself is
  `majordomus.local.embedded`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.config import shown_url
from majordomus.errors import MajordomusError, invalid_input, unavailable
from majordomus.store.cluster import CLUSTER_COMMAND_SECONDS, cluster_client, is_cluster
from majordomus.store.connection import QUICK_POOLS, STURDY
from majordomus.store.policy import (
    API_ANSWER_BOUND_SECONDS,
    API_CONNECT_TIMEOUT_SECONDS,
    API_POOL_WAIT_SECONDS,
    API_READ_TIMEOUT_SECONDS,
    CONNECT_TIMEOUT_SECONDS,
    MAX_CONNECTIONS,
    REACHABLE_PATIENCE_SECONDS,
    REACHABLE_RETRY_SECONDS,
    SOCKET_TIMEOUT_SECONDS,
    WAIT_FOR_CONNECTION_SECONDS,
    keepalive_options,
    retried_errors,
    retry_policy,
)
from majordomus.store.sentinel import NotASentinel, sentinel_client
from majordomus.store.urls import (
    DEFAULT_URL,
    is_cluster_url,
    is_sentinel_url,
    not_a_redis_url,
    shown_redis_url,
)

__all__ = [
    "DEFAULT_URL",
    "RedisClient",
    "api_client",
    "check_reachable",
    "connect",
    "is_in_process",
]

RedisClient = Redis
"""The client type every store class takes (an `ArqRedis` is one too; a `SturdyCluster`
answers the same commands, but is not one: `majordomus.store.cluster.is_cluster` tells
them apart)."""


def is_in_process(client: Any) -> bool:
    """Whether `client` is one of an in-process fakeredis server (`connect(fake_server=...)`
    gives its pool the server)."""
    pool = getattr(client, "connection_pool", None)
    return pool is not None and "server" in getattr(pool, "connection_kwargs", {})


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
    pool_wait: float = WAIT_FOR_CONNECTION_SECONDS,
    retry_timeouts: bool = True,
    deadline: float | None = None,
) -> Any:
    """A client on `url` (or on `fake_server`, an in-process fakeredis server).

    With `arq`, an `ArqRedis` that can also enqueue and poll. The pool holds at most
    `max_connections`; with `wait` (the default) a caller past that waits up to
    `WAIT_FOR_CONNECTION_SECONDS` for a free one, without it the call fails at once.
    `name` is what `CLIENT LIST` shows. A URL that is not a Redis URL is `invalid_input`.
    `pool_wait` bounds the wait for a free connection, and without `retry_timeouts` a
    command that timed out is not sent again; on a cluster, whose client retries and
    follows redirections on its own, `deadline` bounds a command whole (the API's client:
    `api_client`).

    A cluster URL gives a `SturdyCluster`, with `arq` too (what arq's `Worker` calls on its
    pool, a cluster client has: see the module's docstring); `max_connections` bounds each
    node's connections and the client's commands in flight.

    A Sentinel URL gives a client of the master the sentinels name (an `ArqRedis` with
    `arq`), which follows a failover: see the module's docstring.
    """
    if fake_server is None and is_sentinel_url(url):
        return sentinel_client(
            cast(str, url),
            arq=arq,
            max_connections=max_connections,
            wait=wait,
            name=name,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
        )
    if fake_server is None and is_cluster_url(url):
        return cluster_client(
            cast(str, url),
            max_connections=max_connections,
            wait=wait,
            name=name,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            pool_wait=pool_wait,
            deadline=CLUSTER_COMMAND_SECONDS if deadline is None else deadline,
        )
    options: dict[str, Any] = {"max_connections": max_connections}
    if name is not None:
        options["client_name"] = name
    pool_class: type[ConnectionPool] = BlockingConnectionPool if wait else ConnectionPool
    if wait:
        options["timeout"] = pool_wait
    if fake_server is not None:
        from fakeredis import aioredis

        # `FakeConnection` is a deprecated alias (a function, warning at each connection)
        # where fakeredis has `FakeAsyncRedisConnection`.
        fake = getattr(aioredis, "FakeAsyncRedisConnection", None) or aioredis.FakeConnection
        pool = pool_class(connection_class=cast(Any, fake), server=fake_server, **options)
    else:
        options.update(
            socket_connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            retry=retry_policy(retry_timeouts),
            retry_on_error=list(retried_errors(retry_timeouts)),
        )
        if not (url or DEFAULT_URL).startswith("unix:"):  # a unix socket has no keepalive
            options["socket_keepalive"] = True
            options["socket_keepalive_options"] = keepalive_options()
        try:
            pool = QUICK_POOLS[pool_class].from_url(url or DEFAULT_URL, **options)
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
    each connection named `name` in `CLIENT LIST`, and that fails fast when Redis does
    not answer (`API_ANSWER_BOUND_SECONDS`)."""
    return connect(
        url,
        wait=True,
        name=name,
        max_connections=max_connections,
        connect_timeout=API_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=API_READ_TIMEOUT_SECONDS,
        pool_wait=API_POOL_WAIT_SECONDS,
        retry_timeouts=False,
        deadline=API_ANSWER_BOUND_SECONDS - API_POOL_WAIT_SECONDS,
    )


def check_reachable(
    url: str | None, timeout: float = 3.0, patience: float = REACHABLE_PATIENCE_SECONDS
) -> None:
    """Raise `invalid_input` (not a Redis URL) or `unavailable` (no answer) before a process
    command starts serving on `url`; return quietly when Redis answers. A Redis that does
    not answer is asked again for up to `patience` seconds, so a blip at start-up (a
    restart, a failover, a dropped connection) does not stop the process. On a cluster,
    every master must answer (its own PING asks one node); through Sentinel, the master
    the sentinels name (none named yet, as during a failover, is no answer)."""

    async def ping() -> None:
        client = connect(url, connect_timeout=timeout, socket_timeout=timeout)
        everyone = {"target_nodes": RedisCluster.PRIMARIES} if is_cluster(client) else {}
        deadline = time.monotonic() + patience
        try:
            while True:
                try:
                    await client.ping(**everyone)
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
    except RedisClusterException as exc:  # a seed answered: it is no cluster's node
        raise invalid_input(
            f"MAJORDOMUS_REDIS_URL {shown_url(url or DEFAULT_URL)!r} names no cluster ({exc})",
            "use redis://host:port/db for a single Redis, redis+cluster://… for a cluster",
        ) from None
    except NotASentinel as exc:  # a host answered, as no sentinel
        raise invalid_input(
            f"MAJORDOMUS_REDIS_URL {shown_redis_url(cast(str, url))!r} names no Sentinel ({exc})",
            "name the sentinels (port 26379 by default), not the master: "
            "redis+sentinel://host:port[,host:port…]/service[/db]",
        ) from None
    except Exception as exc:
        raise unavailable(
            f"Redis at {shown_redis_url(url or DEFAULT_URL)} is unreachable ({exc})",
            "start Redis, or set MAJORDOMUS_REDIS_URL; `majordomus dev` runs on its own Redis",
        ) from None
