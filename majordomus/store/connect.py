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

A Redis Cluster is named by `redis+cluster://[user:password@]host:port[,host:port...]`
(`rediss+cluster://` for TLS; database 0 only): seeds to ask for the cluster's layout, any
one enough. Its client, `SturdyCluster`, is redis-py's `RedisCluster` with the same policy
on every node's connections, and what redis-py 5.3 leaves out of it (a bound that waits, a
cluster that cannot serve reported as `UNREACHABLE`, connections lost to cancels given
back, scripts in pipelines; see the class). A cluster has no `pubsub()`: `pubsub_of`
answers a subscription for either kind of client. It has no MULTI/EXEC nor WATCH either
(`pipeline(transaction=True)` is refused): on a cluster, a step that must be atomic is a
script whose keys share one hash tag (`majordomus.store.keys`). It is no `ArqRedis` (it
cannot enqueue arq jobs, which majordomus never does), but has what arq's `Worker` calls
on its pool.

A master that Redis Sentinel watches is named by
`redis+sentinel://[user:password@]host:port[,host:port...]/<service>[/<db>]`
(`rediss+sentinel://` for TLS to the master and its replacements): the sentinels (port
26379 when not given), any one that answers enough, and the name they monitor the master
under. The URL's user and password are the master's; the sentinels' own, when they ask for
one (`requirepass` in a sentinel's configuration), are the query's `sentinel_password`
(and `sentinel_username`); the sentinels are spoken to in plain TCP. Its client is a plain
`Redis` (an `ArqRedis` with `arq`) on redis-py's `SentinelConnectionPool` with the same
policy on the master's connections (the sturdy connection, over redis-py's
`SentinelManagedConnection`): each new connection asks the sentinels where the master is,
so after a failover the commands that broke on the old master are retried on the promoted
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
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable, Generator, Iterable
from contextvars import ContextVar
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import ExponentialWithJitterBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterError,
    MaxConnectionsError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)
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
"""The client type every store class takes (an `ArqRedis` is one too; a `SturdyCluster`
answers the same commands, but is not one: `is_cluster` tells them apart)."""

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

API_CONNECT_TIMEOUT_SECONDS = 1.0
API_READ_TIMEOUT_SECONDS = 1.5
API_POOL_WAIT_SECONDS = 0.5
"""The API's client fails fast: a connection opened within 1 s, a reply within 1.5 s (a
blocking read within its block and `BLOCK_MARGIN_SECONDS`), a free connection within
0.5 s, and a command that timed out is not sent again (Redis is not answering: waiting
longer answers nobody). So with Redis stalled every API answer comes within
`API_ANSWER_BOUND_SECONDS`, a 503 that says so; a broken connection is still retried (a
refused one fails in milliseconds)."""
API_ANSWER_BOUND_SECONDS = 3.0
"""The documented bound of an API answer while Redis does not answer (the sum above)."""
BLOCK_MARGIN_SECONDS = 2.0
"""What a blocking read (`blocking_reads`) waits beyond its block for the reply."""

_BLOCKING_READ: ContextVar[float | None] = ContextVar(
    "majordomus_blocking_read", default=None
)


@contextlib.contextmanager
def blocking_reads(block_ms: int | float | None) -> Generator[None, None, None]:
    """Within it, a reply may take `block_ms` and `BLOCK_MARGIN_SECONDS` whatever the
    client's read timeout (an `XREAD BLOCK`, a `BLMOVE`): the API's client reads with a
    short timeout, and its feed reader blocks for seconds."""
    if not block_ms:
        yield
        return
    token = _BLOCKING_READ.set(block_ms / 1000 + BLOCK_MARGIN_SECONDS)
    try:
        yield
    finally:
        _BLOCKING_READ.reset(token)

RETRY_BACKOFF_BASE_SECONDS = 0.05
RETRY_BACKOFF_CAP_SECONDS = 1.0
"""Each retry waits a random time up to base * 2**attempt, at most the cap: at most about
1.4 s over three retries, a blip and not an outage."""


REACHABLE_PATIENCE_SECONDS = 5.0
"""How long the start-up check of `serve` and `worker` keeps asking a silent Redis before
the process stops with "unreachable"."""

REACHABLE_RETRY_SECONDS = 0.25
"""The pause between two asks of the start-up check."""


def retry_policy(timeouts: bool = True) -> Retry:
    """The retry of every client (a fresh one each: redis-py copies it per connection);
    without `timeouts`, a command that timed out is not sent again."""
    backoff = ExponentialWithJitterBackoff(
        cap=RETRY_BACKOFF_CAP_SECONDS, base=RETRY_BACKOFF_BASE_SECONDS
    )
    return Retry(backoff, RETRIES, retried_errors(timeouts))


def retried_errors(timeouts: bool = True) -> tuple[type[RedisError], ...]:
    return (_ConnectionError, _TimeoutError) if timeouts else (_ConnectionError,)


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
            timeout = _BLOCKING_READ.get()
        return await super().read_response(disable_decoding, timeout, **kwargs)

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
            writer = cast(asyncio.StreamWriter, self._writer)  # connected above
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


class _TcpConnection(_Sturdy, Connection):
    pass


class _TlsConnection(_Sturdy, SSLConnection):
    pass


class _UnixConnection(_Sturdy, UnixDomainSocketConnection):
    pass


def _quiet(connection: Any) -> bool:
    """Whether a pooled connection is surely ready for a command, by what the event loop has
    already received: connected, not closed by the server, and holding no unread byte. Read
    off the stream reader's and hiredis' buffers; anything unknown (another parser, another
    asyncio) answers False, and the pool checks the way redis-py does."""
    if not connection.is_connected:
        return False
    stream = connection._reader
    buffered = getattr(stream, "_buffer", None)
    reader = getattr(connection._parser, "_reader", None)
    has_data = getattr(reader, "has_data", None)
    return (
        buffered is not None
        and not buffered
        and not stream.at_eof()
        and has_data is not None
        and not has_data()
    )


class _QuickPool(ConnectionPool):
    """redis-py's pool, handing out a connection without a turn of the event loop.

    redis-py checks each connection it hands out by reading it with a zero timeout (data
    there means a command's answer was left unread, an empty read that the server closed
    it): a read that waits for the loop's next turn, on the critical path of every command
    (100-200 us of a start after an idle moment, measured). A connection the loop has
    already heard nothing on since its last answer (`_quiet`) is handed out at once; any
    other is checked as redis-py checks it. What the quick check cannot see, a close the
    loop has not yet read, fails the command's write or read as a broken connection, which
    the client's retry policy reconnects and sends again (the command never reached Redis).
    """

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        if _quiet(connection):
            return
        await super().ensure_connection(connection)


class _QuickBlockingPool(_QuickPool, BlockingConnectionPool):
    """redis-py's blocking pool with `_QuickPool`'s check, and a free connection taken
    without its lock and timer when nobody waits for one (a waiter, woken by a release,
    keeps the connection that woke it: the slow path serves it)."""

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        waiting = getattr(self._condition, "_waiters", None)
        if (
            waiting is not None
            and not waiting
            and self._available_connections
            and not self._condition.locked()
        ):
            connection = self._available_connections.pop()
            self._in_use_connections.add(connection)
            try:
                await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        return await super().get_connection()


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


def _keepalive_options() -> dict[int, int]:
    """The keepalive timings, where the platform names them (Linux does; macOS has some)."""
    wanted = {
        "TCP_KEEPIDLE": KEEPALIVE_IDLE_SECONDS,
        "TCP_KEEPINTVL": KEEPALIVE_INTERVAL_SECONDS,
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The URL schemes of a Redis Cluster, each with the scheme of one of its nodes."""


def is_cluster_url(url: str | None) -> bool:
    """Whether `url` names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`)."""
    return (url or "").partition("://")[0].lower() in CLUSTER_SCHEMES


def is_cluster(client: Any) -> bool:
    """Whether `client` is a Redis Cluster's (one `connect` made from a cluster URL)."""
    return isinstance(client, RedisCluster)


def is_in_process(client: Any) -> bool:
    """Whether `client` is one of an in-process fakeredis server (`connect(fake_server=...)`
    gives its pool the server)."""
    pool = getattr(client, "connection_pool", None)
    return pool is not None and "server" in getattr(pool, "connection_kwargs", {})


def _hosts_of(url: str, default_port: int) -> tuple[str, str, list[tuple[str, int]], str, str]:
    """What a URL naming several hosts holds: its scheme, its credentials (`user:password@`
    as written, or nothing), its hosts with their ports (`default_port` where none is
    given), its first host as written, and what follows the hosts (path and query). Raises
    `ValueError` for a host without a name or with a bad port."""
    scheme, _, rest = url.partition("://")
    ends = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    authority, tail = rest[: min(ends, default=len(rest))], rest[min(ends, default=len(rest)) :]
    user, at, hosts = authority.rpartition("@")
    found = []
    for host in hosts.split(","):
        parts = urlsplit(f"//{host}")
        if not parts.hostname:
            raise ValueError(f"no host in {host!r}")
        found.append((parts.hostname, parts.port or default_port))  # `.port` raises on a bad port
    return scheme, user + at, found, hosts.split(",", 1)[0], tail


def _cluster_seeds(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The seeds of a cluster URL, and the options its nodes share (credentials, TLS, the
    query's), as redis-py reads them from the same URL with its first seed alone. Raises
    `ValueError` (or `KeyError`: no cluster scheme) for a URL that names no cluster."""
    scheme, credentials, seeds, first, tail = _hosts_of(url, 6379)
    options: dict[str, Any] = dict(
        parse_url(f"{CLUSTER_SCHEMES[scheme.lower()]}://{credentials}{first}{tail}")
    )
    if options.pop("db", 0):
        raise ValueError("a cluster has database 0 only")
    options.pop("host", None)
    options.pop("port", None)
    return seeds, options


_HOLDING: ContextVar[bool] = ContextVar("majordomus_cluster_connection", default=False)
"""Set while a task holds a connection of a waiting cluster client, so that what it sends
inside (a pipeline sending a redirected command again) waits for no second one."""

_IN_COMMAND: ContextVar[bool] = ContextVar("majordomus_cluster_command", default=False)
"""Set while a `SturdyCluster` command is under way (`SturdyCluster.aclose`)."""

SILENT_NODE_SECONDS = 10.0
"""How long a node that failed a command is the last one asked for the cluster's layout."""

CLUSTER_COMMAND_SECONDS = 5.0
"""The longest a cluster client's command takes, retries and redirections included (the
API's is shorter): redis-py's retries of a master that does not answer would take 40 s."""

_CANNOT_SERVE = (ClusterError, SlotNotCoveredError)
"""What a cluster answers while it cannot serve a slot (CLUSTERDOWN, MASTERDOWN, a slot no
node covers, redirections without end): an outage, not a fault of the command."""


class SturdyCluster(RedisCluster):
    """redis-py's cluster client, with the module's policy where redis-py 5.3 has none.

    - The bound waits. redis-py's nodes fail a command past `max_connections` at once
      (`MaxConnectionsError`); with `wait`, a caller past the bound waits up to
      `pool_wait` for a turn, then fails with `ConnectionError("No connection
      available.")`, as a waiting pool does. A command to one node takes one of that
      node's turns (half the bound), a pipeline or a command to several nodes one of the
      client's (the other half), so no node opens more than the bound, and a node that
      does not answer holds its own turns only: the other nodes' commands go on.
    - With a `deadline`, a command ends within it, retries and redirections included.
    - Connections lost to cancels come back. A node forgets a connection whose command was
      cancelled while it connected or wrote (and a pipeline's, while it read), but counts
      it: past the bound though fewer are in flight, the client closes every node and
      sends the command again on fresh ones (what redis-py does after any broken
      connection, except that it asks the layout of the old nodes again, lost connections
      and all: here each new layout is asked of fresh seeds).
    - The URL's seeds stay seeds. redis-py drops a seed whose connection broke, so a
      cluster whose nodes all went away once is never found again; here the seeds of
      each new layout are the nodes last known, then the URL's.
    - A cluster that cannot serve is unreachable: no seed answering, slots uncovered, and
      what `_CANNOT_SERVE` names, once redis-py's own retries are spent, reach the caller
      as a `ConnectionError` (`majordomus.store.failures.UNREACHABLE`), the cause kept.
      A seed that answers but is no cluster's node stays a `RedisClusterException`.
    - A script queued in a pipeline is loaded on the shards for it (redis-py does this for
      one Redis, not for a cluster), like a script called alone: on NOSCRIPT.
    - `close(close_connection_pool=...)`, the call arq's `Worker.close` makes on its pool.
    """

    def __init__(
        self,
        *,
        seeds: list[tuple[str, int]],
        connection_class: type[AbstractConnection],
        wait: bool,
        pool_wait: float = WAIT_FOR_CONNECTION_SECONDS,
        deadline: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__(startup_nodes=[ClusterNode(host, port) for host, port in seeds], **options)
        self.connection_kwargs["connection_class"] = connection_class  # every node made later
        self._seeds = seeds
        bound: int = options["max_connections"]
        self._node_share = max(1, bound // 2)
        self._turns = asyncio.Semaphore(max(1, bound - self._node_share)) if wait else None
        """The turns of what goes to no one node (a pipeline, a command to every master)."""
        self._node_turns: dict[str, asyncio.Semaphore] = {}
        """Each node's turns: a node that does not answer holds its own, not the others'.
        With the shared ones, no node is asked for more than `max_connections` at once."""
        self._pool_wait = pool_wait
        self._silent: dict[str, float] = {}
        """Nodes that failed a command lately, each until when (`_silent_node`)."""
        self._deadline = deadline
        """The longest a command may take, its retries and redirections included (None:
        as redis-py's retries go); a blocking read's own bound (`blocking_reads`) wins."""
        self._fresh_seeds()
        # redis-py asks the first master for the command table at every new layout, and a
        # layout is asked again after any node failed a command: with that master stalled,
        # no layout could be had, and every command of every partition waited and failed.
        # The table does not change while the client lives: it is asked once.
        parser = self.commands_parser
        asked = parser.initialize

        async def table_once(node: Any = None) -> None:
            if not parser.commands:
                await asked(node)

        parser.initialize = table_once  # type: ignore[method-assign]

    def _fresh_seeds(self) -> None:
        """New seed nodes (no connection yet): the nodes last known, then the URL's."""
        known = [(n.host, n.port) for n in self.nodes_manager.startup_nodes.values()]
        fresh: dict[str, ClusterNode] = {}
        for host, port in known + self._seeds:
            node = ClusterNode(host, port, **self.connection_kwargs)
            fresh.setdefault(node.name, node)
        now = time.monotonic()
        silent = {name for name, until in self._silent.items() if until > now}
        # A node that just failed a command is asked last: a stalled one would hold every
        # new layout for its read timeout.
        self.nodes_manager.startup_nodes = dict(
            sorted(fresh.items(), key=lambda item: item[0] in silent)
        )

    async def initialize(self) -> RedisCluster:
        if self._initialize:  # new, or closed (the old nodes closed with it)
            if not self._lock:
                self._lock = asyncio.Lock()
            async with self._lock:  # not while another asks the old seeds
                if self._initialize:
                    self._fresh_seeds()
        try:
            return await super().initialize()
        except RedisClusterException as exc:
            if isinstance(exc.__cause__, RedisClusterException):  # "Cluster mode is not enabled"
                raise
            raise _ConnectionError(str(exc)) from exc

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return await self._serve(
            lambda: RedisCluster.execute_command(self, *args, **kwargs),
            self._turns_for(args, kwargs),
        )

    def _turns_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Semaphore | None:
        """The turns of the node a command goes to: its first key's (a script's first key,
        whose hash tag all its keys share), when the layout is known; else the client's."""
        if self._turns is None or self._initialize or "target_nodes" in kwargs or len(args) < 2:
            return self._turns
        try:
            name = str(args[0]).upper()
            if name in ("EVALSHA", "EVAL"):
                if len(args) < 4 or not int(args[2]):
                    return self._turns
                key = args[3]
            else:
                key = args[1]
            node = self.nodes_manager.get_node_from_slot(self.keyslot(key))
        except Exception:  # noqa: BLE001  no key there, or a slot no node serves yet
            return self._turns
        turns = self._node_turns.get(node.name)
        if turns is None:
            turns = self._node_turns[node.name] = asyncio.Semaphore(self._node_share)
        return turns

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if transaction or shard_hint:
            raise RedisClusterException(
                "a Redis Cluster has no MULTI/EXEC (nor WATCH): make the step a script "
                "whose keys share one hash tag, or use pipeline(transaction=False)"
            )
        return _SturdyClusterPipeline(self)  # type: ignore[abstract]

    def register_script(self, script: Any) -> AsyncScript:  # type: ignore[override]
        return _ClusterScript(cast(Any, self), script)

    async def close(self, close_connection_pool: bool | None = None) -> None:
        """`aclose`, under the name and signature arq's `Worker.close` calls on its pool."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close every node, but when redis-py calls it from a command one node failed:
        there it only asks for the layout again (closing every node would break the
        commands in flight to the nodes that answer, and hold the next ones behind a new
        layout: one stalled master would stop every partition). The failed connection is
        closed already."""
        if _IN_COMMAND.get():
            self._initialize = True
            return
        await RedisCluster.aclose(self)

    def _silent_node(self, turns: asyncio.Semaphore | None) -> None:
        """The node whose turns these are failed a command: asked last for a layout for a
        while (`SILENT_NODE_SECONDS`)."""
        for name, mine in self._node_turns.items():
            if mine is turns:
                self._silent[name] = time.monotonic() + SILENT_NODE_SECONDS
                return

    async def _serve(
        self, send: Callable[[], Awaitable[Any]], turns: asyncio.Semaphore | None = None
    ) -> Any:
        turns = turns or self._turns
        token = None
        if turns is not None and not _HOLDING.get():
            if turns.locked():
                try:
                    async with asyncio.timeout(self._pool_wait):
                        await turns.acquire()
                except TimeoutError:
                    raise _ConnectionError("No connection available.") from None
            else:
                await turns.acquire()  # free: returns at once
            token = _HOLDING.set(True)
        deadline = _BLOCKING_READ.get() or self._deadline
        inside = _IN_COMMAND.set(True)
        try:
            try:
                async with asyncio.timeout(deadline):
                    return await send()
            except TimeoutError:
                # The deadline, not a socket's timeout (redis-py's is its own class): a node
                # that does not answer within it is one not answering.
                self._silent_node(turns)
                raise _TimeoutError(f"the cluster did not answer within {deadline:g} s") from None
            except MaxConnectionsError:
                if token is None:  # no turns: past the bound is a failure, as in a pool
                    raise
                await RedisCluster.aclose(self)  # connections lost to cancels: fresh nodes
                return await send()
            except (_ConnectionError, _TimeoutError):
                self._silent_node(turns)
                raise
        except _CANNOT_SERVE as exc:
            raise _ConnectionError(f"the cluster cannot serve: {exc}") from exc
        finally:
            _IN_COMMAND.reset(inside)
            if token is not None:
                _HOLDING.reset(token)
                cast(asyncio.Semaphore, turns).release()


class _SturdyClusterPipeline(ClusterPipeline):
    """A cluster pipeline (one per shard it touches, sent together) on `SturdyCluster`'s
    turns and failures, which takes scripts: redis-py 5.3 blocks EVALSHA in a cluster
    pipeline, though it routes it by its keys like any command, and loads no script for
    it (this one loads those queued in it on NOSCRIPT, then sends again)."""

    def __init__(self, client: SturdyCluster) -> None:
        super().__init__(client)
        self.scripts: set[AsyncScript] = set()

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def __await__(self) -> Generator[Any, None, Any]:
        # redis-py's empties the pipeline: a command awaited as it is queued (a script's
        # call, `await pipe.get(...)`) would drop the ones queued before it.
        return self._itself().__await__()

    async def _itself(self) -> _SturdyClusterPipeline:
        if self._client._initialize:
            await self._client.initialize()
        return self

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client = cast(SturdyCluster, self._client)
        stack = list(self._command_stack)

        async def send() -> Any:
            self._command_stack = list(stack)  # redis-py's execute empties it
            try:
                return await ClusterPipeline.execute(self, raise_on_error, allow_redirections)
            except NoScriptError:
                if not self.scripts:
                    raise
            # A shard without the scripts (new, restarted, flushed): load them everywhere,
            # then send what did not run (redis-py sends only the commands without a result).
            for script in self.scripts:
                script.sha = await client.script_load(script.script)
            self._command_stack = list(stack)
            return await ClusterPipeline.execute(self, raise_on_error, allow_redirections)

        return await client._serve(send)


class _ClusterScript(AsyncScript):
    """A script that, queued in a `_SturdyClusterPipeline`, tells it so (see there)."""

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        if isinstance(client, _SturdyClusterPipeline):
            client.scripts.add(self)
        return await super().__call__(keys, args, client)


class _NodePubSub(PubSub):
    """A subscription on a pool of its own (one connection to one node of a cluster):
    closing it closes that connection."""

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.connection_pool.disconnect()


async def pubsub_of(client: Any) -> PubSub:
    """A subscription for `client`: its own `pubsub()` on one Redis; on a cluster, which has
    none, one on a connection of its own (the cluster's policy, closed with it) to a node
    picked at random among the cluster's. A PUBLISH on a cluster, a script's included,
    reaches the subscribers of every node."""
    if not is_cluster(client):
        return cast(PubSub, client.pubsub())
    await client.initialize()
    node: ClusterNode = random.choice(client.get_nodes())
    pool = ConnectionPool(
        connection_class=node.connection_class, max_connections=1, **node.connection_kwargs
    )
    return _NodePubSub(pool)


def _cluster_client(
    url: str,
    *,
    max_connections: int,
    wait: bool,
    name: str | None,
    connect_timeout: float,
    socket_timeout: float,
    pool_wait: float = WAIT_FOR_CONNECTION_SECONDS,
    deadline: float | None = None,
) -> SturdyCluster:
    """`connect` on a cluster URL: the same policy, each node with its own bound."""
    try:
        seeds, url_options = _cluster_seeds(url)
    except (ValueError, KeyError) as exc:
        raise not_a_redis_url(url, exc) from None
    theirs = url_options.pop("connection_class", Connection)
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "socket_keepalive": True,
        "socket_keepalive_options": _keepalive_options(),
        "retry": retry_policy(),
        "retry_on_error": [_ConnectionError, _TimeoutError],
        "cluster_error_retry_attempts": RETRIES,
        "ssl": theirs is SSLConnection,
    }
    if name is not None:
        options["client_name"] = name
    options.update(url_options)  # the URL's query wins, as in `from_url`
    try:
        return SturdyCluster(  # type: ignore[abstract]
            seeds=seeds,
            connection_class=STURDY[theirs],
            wait=wait,
            pool_wait=pool_wait,
            deadline=deadline,
            **options,
        )
    except (TypeError, RedisClusterException) as exc:  # an option RedisCluster has not
        raise not_a_redis_url(url, exc) from None


SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
"""The URL schemes of a master that Sentinel names, each with the scheme of the master's
connections."""

SENTINEL_PORT = 26379
"""A sentinel's port where the URL gives none (Sentinel's own default)."""

SENTINEL_CREDENTIALS = ("sentinel_username", "sentinel_password")
"""The query parameters of a Sentinel URL that are the sentinels' own credentials (the URL's
user and password are the master's)."""


def is_sentinel_url(url: str | None) -> bool:
    """Whether `url` names a master through Sentinel (`redis+sentinel://`, `rediss+sentinel://`)."""
    return (url or "").partition("://")[0].lower() in SENTINEL_SCHEMES


class _SentinelTcpConnection(_Sturdy, SentinelManagedConnection):
    """A connection to the master the sentinels name (asked again at each connect, so a
    connection that broke on the old master opens on the new one) with `_Sturdy`'s
    writes, handshake and packing; a master demoted to a replica (READONLY) is a broken
    connection, as redis-py's `SentinelManagedConnection` has it."""


class _SentinelTlsConnection(_Sturdy, SentinelManagedSSLConnection):
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


class _NotASentinel(ResponseError):
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
            raise _NotASentinel(f"a host of the URL is no sentinel ({exc})") from exc

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


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any], dict[str, Any]]:
    """The sentinels of a Sentinel URL, its service name, the master's options
    (credentials, database, TLS, the query's), as redis-py reads them from a URL naming
    the master itself, and the sentinels' own credentials. Raises `ValueError` (or
    `KeyError`: no Sentinel scheme) for a URL that names no master through Sentinel."""
    scheme, credentials, sentinels, first, tail = _hosts_of(url, SENTINEL_PORT)
    path, _, query = tail.partition("?")
    service, _, db = path.removeprefix("/").partition("/")
    service, db = unquote(service), db.rstrip("/")
    if not service:
        raise ValueError("no service name: the path names it, as in host:26379/mymaster")
    if db and not db.isdigit():
        raise ValueError(f"{db!r} is no database number")
    pairs = parse_qsl(query, keep_blank_values=True)
    theirs = {key.removeprefix("sentinel_"): v for key, v in pairs if key in SENTINEL_CREDENTIALS}
    rest = urlencode([(key, v) for key, v in pairs if key not in SENTINEL_CREDENTIALS])
    master = f"{SENTINEL_SCHEMES[scheme.lower()]}://{credentials}{first}/{db}"
    options: dict[str, Any] = dict(parse_url(master + (f"?{rest}" if rest else "")))
    options.pop("host", None)
    options.pop("port", None)
    return sentinels, service, options, theirs


def _sentinel_client(
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
        sentinels, service, url_options, sentinel_credentials = _sentinel_parts(url)
    except (ValueError, KeyError) as exc:
        raise not_a_redis_url(url, exc) from None
    theirs = url_options.pop("connection_class", Connection)
    keepalive = {"socket_keepalive": True, "socket_keepalive_options": _keepalive_options()}
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
        sentinel.connection_pool.connection_class = _TcpConnection
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
        return _sentinel_client(
            cast(str, url),
            arq=arq,
            max_connections=max_connections,
            wait=wait,
            name=name,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
        )
    if fake_server is None and is_cluster_url(url):
        return _cluster_client(
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
            options["socket_keepalive_options"] = _keepalive_options()
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


def _shown(url: str) -> str:
    """`shown_url`, with a Sentinel URL's `sentinel_password` (in its query) hidden too."""
    if is_sentinel_url(url):
        url = re.sub(r"(?<=[?&]sentinel_password=)[^&#]*", "***", url)
    return shown_url(url)


def not_a_redis_url(url: str, exc: Exception) -> MajordomusError:
    return invalid_input(
        f"MAJORDOMUS_REDIS_URL {_shown(url)!r} is not a Redis URL ({exc})",
        "use redis://host:port/db, rediss://… for TLS, unix:///path/to/socket, "
        "redis+cluster://host:port[,host:port…] for a Redis Cluster, or "
        "redis+sentinel://host:port[,host:port…]/service[/db] for a master Sentinel watches",
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
    except _NotASentinel as exc:  # a host answered, as no sentinel
        raise invalid_input(
            f"MAJORDOMUS_REDIS_URL {_shown(cast(str, url))!r} names no Sentinel ({exc})",
            "name the sentinels (port 26379 by default), not the master: "
            "redis+sentinel://host:port[,host:port…]/service[/db]",
        ) from None
    except Exception as exc:
        raise unavailable(
            f"Redis at {_shown(url or DEFAULT_URL)} is unreachable ({exc})",
            "start Redis, or set MAJORDOMUS_REDIS_URL; `majordomus dev` runs on its own Redis",
        ) from None
