"""A Redis Cluster's client: `SturdyCluster`, redis-py's `RedisCluster` with the policy of
every majordomus client on every node's connections, and what redis-py 5.3 leaves out of
it (see the class); `pubsub_of`, a subscription on either kind of client.

A cluster has no MULTI/EXEC nor WATCH (`pipeline(transaction=True)` is refused): on a
cluster, a step that must be atomic is a script whose keys share one hash tag
(`majordomus.store.keys`). Its client is no `ArqRedis` (it cannot enqueue arq jobs, which
majordomus never does), but has what arq's `Worker` calls on its pool.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Collection, Generator
from contextvars import ContextVar
from typing import Any, cast

from redis.asyncio import ConnectionPool
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, NodesManager, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterError,
    MaxConnectionsError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.store.connection import STURDY
from majordomus.store.policy import (
    RETRIES,
    WAIT_FOR_CONNECTION_SECONDS,
    blocking_read_timeout,
    keepalive_options,
    retry_policy,
)
from majordomus.store.redis_internals import (
    ask_layout_again,
    layout_due,
    layout_lock,
    pipeline_cluster,
    queue_again,
    queued_commands,
)
from majordomus.store.urls import cluster_seeds, not_a_redis_url


def is_cluster(client: Any) -> bool:
    """Whether `client` is a Redis Cluster's (one `connect` made from a cluster URL)."""
    return isinstance(client, RedisCluster)


_HOLDING: ContextVar[bool] = ContextVar("majordomus_cluster_connection", default=False)
"""Set while a task holds a connection of a waiting cluster client, so that what it sends
inside (a pipeline sending a redirected command again) waits for no second one."""

_IN_COMMAND: ContextVar[tuple[asyncio.Task[Any] | None, int] | None] = ContextVar(
    "majordomus_cluster_command", default=None
)
"""Set while a `SturdyCluster` command is under way (`SturdyCluster.aclose`): its task and
the cancels asked of that task when it began (`_cancels`)."""


def _cancels() -> tuple[asyncio.Task[Any] | None, int]:
    """The current task, and how many cancels were asked of it and not withdrawn."""
    task = asyncio.current_task()
    return task, task.cancelling() if task is not None else 0


def _keep_cancel(since: tuple[asyncio.Task[Any] | None, int] | None) -> None:
    """Raise CancelledError when the current task was asked to cancel after `since`
    (`_cancels()` then) and is still going: the cancel was lost on the way.

    asyncio loses one where redis-py gathers tasks, one per node (a cluster pipeline, a
    command to every master, closing the nodes): cancelled while one node's task has
    already failed (a node out of connections fails at once), `gather` hands the caller
    that failure instead of its CancelledError, and the cancel is never delivered (CPython
    3.11 to 3.13). redis-py then retries the failure, or sends again here: the task that
    was told to stop goes on for ever. A cancel asked before `since` (a caller sending a
    command as it cleans up after its cancel) is the caller's business."""
    if since is None:
        return
    task, now = _cancels()
    before = since[1] if task is since[0] else 0  # a task made inside the command began with none
    if now > before:
        raise asyncio.CancelledError("cancelled as a node failed (the cancel was lost)")


SILENT_NODE_SECONDS = 10.0
"""How long a node that failed a command is the last one asked for the cluster's layout."""

CLUSTER_COMMAND_SECONDS = 5.0
"""The longest a cluster client's command takes, retries and redirections included (the
API's is shorter): redis-py's retries of a master that does not answer would take 40 s."""

_CANNOT_SERVE = (ClusterError, SlotNotCoveredError)
"""What a cluster answers while it cannot serve a slot (CLUSTERDOWN, MASTERDOWN, a slot no
node covers, redirections without end): an outage, not a fault of the command."""


class _KeptNodes(NodesManager):
    """redis-py's nodes manager, which keeps the nodes it knows across a new layout.

    redis-py's makes a new `ClusterNode` for every node at each layout it asks, and closes
    the old ones, their connections in use included: every command in flight to every
    master failed with a broken connection, which redis-py answers with yet another
    layout. With one master stalled, each of its timeouts asked a layout, which broke the
    healthy masters' commands, each of which asked another (one of them, maybe, of the
    stalled master first, the others waiting on it): a storm in which no partition was
    served. Here a node still at the same address keeps its object and its connections;
    only after the client closed its nodes (`default_node` unset: closed, a layout that
    failed, or the first) are they new, as in redis-py (connections lost to cancels come
    back that way: `SturdyCluster`)."""

    __slots__ = ()

    def set_nodes(
        self, old: dict[str, ClusterNode], new: dict[str, ClusterNode], remove_old: bool = False
    ) -> None:
        if old is self.nodes_cache and self.default_node is not None:
            swap: dict[int, ClusterNode] = {}
            for name, node in new.items():
                mine = old.get(name)
                if (
                    mine is not None
                    and mine is not node
                    and (mine.host, mine.port)
                    == (
                        node.host,
                        node.port,
                    )
                ):
                    mine.server_type = node.server_type
                    swap[id(node)] = mine
            if swap:
                shared = {id(nodes): nodes for nodes in self.slots_cache.values()}
                for nodes in shared.values():  # one list per slot range, the new nodes'
                    nodes[:] = [swap.get(id(node), node) for node in nodes]
                new = {name: swap.get(id(node), node) for name, node in new.items()}
        super().set_nodes(old, new, remove_old)


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
    - A cancel is never lost. asyncio's `gather`, under redis-py's pipelines, hands a
      node's failure to a caller cancelled in the same turn of the loop, and the cancel
      with it; redis-py would then retry, and this client send again, for a task told to
      stop (`_keep_cancel`): here such a command ends with CancelledError, sent no more.
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
        self.nodes_manager.__class__ = _KeptNodes  # the same object, one method more
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
        since = _IN_COMMAND.get() or _cancels()
        if layout_due(self):  # new, or closed (the old nodes closed with it)
            async with layout_lock(self):  # not while another asks the old seeds
                if layout_due(self):
                    self._fresh_seeds()
        try:
            layout = await super().initialize()
        except RedisClusterException as exc:
            _keep_cancel(since)  # closing the nodes gathers tasks too (`_keep_cancel`)
            if isinstance(exc.__cause__, RedisClusterException):  # "Cluster mode is not enabled"
                raise
            raise _ConnectionError(str(exc)) from exc
        _keep_cancel(since)
        return layout

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return await self._serve(
            lambda: RedisCluster.execute_command(self, *args, **kwargs),
            self._turns_for(args, kwargs),
        )

    def _turns_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Semaphore | None:
        """The turns of the node a command goes to: its first key's (a script's first key,
        whose hash tag all its keys share), when the layout is known; else the client's."""
        if self._turns is None or layout_due(self) or "target_nodes" in kwargs or len(args) < 2:
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
        inside = _IN_COMMAND.get()
        if inside is not None:
            # redis-py calls it before it retries: a cancel lost meanwhile stops the retry.
            _keep_cancel(inside)
            # The node whose command failed, redis-py has just dropped from the seeds: it is
            # asked last for the layout from now on, not only once the command is given up
            # (a stalled master asked first would hold the layout, and every command, for
            # its read timeout and retries).
            nodes = self.nodes_manager
            for name in nodes.nodes_cache:
                if name not in nodes.startup_nodes:
                    self._silent[name] = time.monotonic() + SILENT_NODE_SECONDS
            ask_layout_again(self)
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
        deadline = blocking_read_timeout() or self._deadline
        since = _cancels()
        inside = _IN_COMMAND.set(since)
        try:
            try:
                async with asyncio.timeout(deadline):
                    answer = await send()
            except TimeoutError:
                # The deadline, not a socket's timeout (redis-py's is its own class): a node
                # that does not answer within it is one not answering.
                self._silent_node(turns)
                raise _TimeoutError(f"the cluster did not answer within {deadline:g} s") from None
            except MaxConnectionsError:
                _keep_cancel(since)  # never send again for a caller told to stop
                if token is None:  # no turns: past the bound is a failure, as in a pool
                    raise
                await RedisCluster.aclose(self)  # connections lost to cancels: fresh nodes
                answer = await send()
            except (_ConnectionError, _TimeoutError):
                self._silent_node(turns)
                _keep_cancel(since)
                raise
            _keep_cancel(since)  # an answer had after the caller's cancel was lost
            return answer
        except _CANNOT_SERVE as exc:
            _keep_cancel(since)
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
        client = pipeline_cluster(self)
        if layout_due(client):
            await client.initialize()
        return self

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client = cast(SturdyCluster, pipeline_cluster(self))
        stack = queued_commands(self)

        async def send() -> Any:
            queue_again(self, stack)  # redis-py's execute empties it
            try:
                return await ClusterPipeline.execute(self, raise_on_error, allow_redirections)
            except NoScriptError:
                if not self.scripts:
                    raise
            # A shard without the scripts (new, restarted, flushed): load them on the shards
            # this pipeline sends them to, then send what did not run (redis-py sends only
            # the commands without a result).
            for script in self.scripts:
                script.sha = await load_script(client, script.script, _script_keys(stack))
            queue_again(self, stack)
            return await ClusterPipeline.execute(self, raise_on_error, allow_redirections)

        return await client._serve(send)


def _script_keys(stack: list[Any]) -> list[Any]:
    """The first key of each script queued in a pipeline (`queued_commands`): the shards
    they run on."""
    keys = []
    for command in stack:
        args = command.args
        if len(args) > 3 and str(args[0]).upper() == "EVALSHA" and int(args[2]):
            keys.append(args[3])
    return keys


async def load_script(client: Any, script: Any, keys: Collection[Any] = ()) -> str:
    """Load `script` where it is about to run, its sha returned: on one Redis, there; on a
    cluster, on the masters that serve `keys` (every master when none is given, or the
    layout is not known). redis-py's SCRIPT LOAD goes to every master: with one stalled, a
    script run on a healthy one that had lost it (new, restarted, flushed) waited for the
    stalled one and failed with it."""
    if not is_cluster(client) or not keys:
        return cast(str, await client.script_load(script))
    try:
        nodes = {}
        for key in keys:
            node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
            nodes[node.name] = node
    except Exception:  # noqa: BLE001  a slot no node serves yet: every master
        return cast(str, await client.script_load(script))
    sha = await client.execute_command("SCRIPT LOAD", script, target_nodes=list(nodes.values()))
    return cast(str, sha)


class _ClusterScript(AsyncScript):
    """A script that, queued in a `_SturdyClusterPipeline`, tells it so (see there), and,
    run alone on a shard that lost it, is loaded on that shard only (`load_script`)."""

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        if isinstance(client, _SturdyClusterPipeline):
            client.scripts.add(self)
            return await super().__call__(keys, args, cast(Any, client))
        target: Any = self.registered_client if client is None else client
        keys = list(keys or ())
        sent = (*keys, *(args or ()))
        try:
            return await target.evalsha(self.sha, len(keys), *sent)
        except NoScriptError:
            self.sha = await load_script(target, self.script, keys[:1])
            return await target.evalsha(self.sha, len(keys), *sent)


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


def cluster_client(
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
        seeds, url_options = cluster_seeds(url)
    except (ValueError, KeyError) as exc:
        raise not_a_redis_url(url, exc) from None
    theirs = url_options.pop("connection_class", Connection)
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive_options(),
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
