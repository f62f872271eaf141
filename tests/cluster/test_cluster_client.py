"""The client majordomus makes from a cluster URL, against a real three-master cluster
(`tests/cluster/conftest.py`): it routes each command to the master of its slot, runs a
script whose keys share a hash tag on any master and refuses one whose keys span slots
(the rule the key layout follows), pipelines across slots, hears a PUBLISH made on any
shard, keeps the module's policy (timeouts, bound, retries), and meets a master's loss
with the store's unreachable error, then serves again once it is back."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, NodesManager, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.crc import key_slot
from redis.exceptions import ClusterCrossSlotError, MaxConnectionsError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError

from majordomus.errors import MajordomusError
from majordomus.local.embedded import free_port
from majordomus.store.cluster import is_cluster, pubsub_of
from majordomus.store.connect import api_client, check_reachable, connect
from majordomus.store.connection import STURDY
from majordomus.store.failures import UNREACHABLE
from majordomus.store.policy import SOCKET_TIMEOUT_SECONDS, blocking_reads
from majordomus.store.redis_internals import ask_layout_again
from majordomus.store.signals import Signal, SignalStore
from tests.cluster.conftest import LocalCluster
from tests.conftest import LIVENESS_SECONDS, make_settings, until

pytestmark = [pytest.mark.process, pytest.mark.slow]

WRITE_THEN_COUNT = """
redis.call('SET', KEYS[1], ARGV[1])
return {redis.call('INCR', KEYS[2]), redis.call('GET', KEYS[1])}
"""

PUBLISH = """
redis.call('SET', KEYS[1], ARGV[2])
return redis.call('PUBLISH', ARGV[1], ARGV[2])
"""


def tag_on(cluster: LocalCluster, port: int, name: str = "t") -> str:
    """A hash tag `{<name><n>}` whose slot the master on `port` serves."""
    for n in range(10_000):
        tag = f"{{{name}{n}}}"
        if cluster.owner(key_slot(tag[1:-1].encode())) == port:
            return tag
    raise AssertionError(f"no tag on {port}")


def keys_held(cluster: LocalCluster, port: int) -> set[bytes]:
    return set(cluster.ask(port, "KEYS", "*"))


async def test_a_cluster_url_gives_a_cluster_client_with_the_policy_of_every_client(
    cluster: LocalCluster,
) -> None:
    client = connect(cluster.url, name="probe", max_connections=7)
    try:
        assert is_cluster(client) and isinstance(client, RedisCluster)
        assert await client.ping()
        nodes = client.get_nodes()
        assert sorted(n.port for n in nodes) == sorted(cluster.ports)
        for node in nodes:
            assert node.connection_class is STURDY[Connection]  # hiredis packing, sturdy writes
            assert node.max_connections == 7
            assert node.connection_kwargs["socket_timeout"] == SOCKET_TIMEOUT_SECONDS
            assert node.connection_kwargs["socket_keepalive"] is True
            assert node.connection_kwargs["retry"] is not None
        names = {c["name"] for p in cluster.ports for c in cluster.ask(p, "CLIENT LIST")}
        assert "probe" in names
    finally:
        await client.aclose()
    api = api_client(cluster.url, max_connections=5, name="md-api")
    try:
        assert is_cluster(api) and await api.ping()
        assert {n.max_connections for n in api.get_nodes()} == {5}
    finally:
        await api.aclose()


async def test_one_dead_seed_among_the_seeds_is_enough_to_find_the_cluster(
    cluster: LocalCluster,
) -> None:
    client = connect(f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{cluster.ports[1]}")
    try:
        assert await client.set("k", "v") and await client.get("k") == b"v"
        assert len(client.get_nodes()) == 3
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://",
        "redis+cluster://127.0.0.1:1,",
        "redis+cluster://127.0.0.1:notaport",
        "redis+cluster://127.0.0.1:7000/3",
        "redis+cluster://127.0.0.1:7000?no_such_option=1",
        "redis+sentinel://a:26379",
    ],
)
def test_a_url_that_names_no_cluster_is_invalid_input(url: str) -> None:
    with pytest.raises(MajordomusError) as raised:
        connect(url)
    assert raised.value.code == "invalid_input"
    assert "is not a Redis URL" in str(raised.value)


def test_a_tls_cluster_url_gets_the_sturdy_tls_connection() -> None:
    client = connect("rediss+cluster://:secret@127.0.0.1:7000,127.0.0.1:7001?ssl_cert_reqs=none")
    assert is_cluster(client)
    for node in client.nodes_manager.startup_nodes.values():
        assert node.connection_class is STURDY[SSLConnection]
        assert node.connection_kwargs["password"] == "secret"
        assert node.connection_kwargs["ssl_cert_reqs"] == "none"


def test_a_cluster_url_naming_a_single_redis_is_invalid_input(redis_url: str) -> None:
    """A seed that answers, but is no cluster's node: a mistake to name, not an outage."""
    host_port = redis_url.split("://", 1)[1].split("/", 1)[0]
    with pytest.raises(MajordomusError) as raised:
        check_reachable(f"redis+cluster://{host_port}", patience=0)
    assert raised.value.code == "invalid_input"
    assert "Cluster mode is not enabled" in str(raised.value)


def test_a_plain_url_still_gives_one_redis_client() -> None:
    client = connect("redis://127.0.0.1:6379/0")
    assert not is_cluster(client) and isinstance(client, Redis)
    assert not is_cluster(connect("redis://127.0.0.1:6379/0", arq=True))


async def test_single_key_commands_land_on_the_master_of_their_slot(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    keys = [f"key:{n}" for n in range(60)]
    for key in keys:
        await cluster_client.set(key, key)
    held = {port: keys_held(cluster, port) for port in cluster.ports}
    assert all(held.values()), f"a master holds none of 60 keys: {held}"
    for key in keys:
        owner = cluster.owner(key_slot(key.encode()))
        assert key.encode() in held[owner]
        assert await cluster_client.get(key) == key.encode()
    assert sum(len(h) for h in held.values()) == len(keys)


async def test_a_script_whose_keys_share_a_hash_tag_runs_on_every_master(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    await cluster_client.script_flush()  # on every master
    script = cluster_client.register_script(WRITE_THEN_COUNT)
    for port in cluster.ports:
        tag = tag_on(cluster, port)
        # The first call on each master meets NOSCRIPT, loads it everywhere, runs it.
        assert await script(keys=[f"{tag}:value", f"{tag}:count"], args=["x"]) == [1, b"x"]
        assert await script(keys=[f"{tag}:value", f"{tag}:count"], args=["y"]) == [2, b"y"]
        assert keys_held(cluster, port) >= {f"{tag}:value".encode(), f"{tag}:count".encode()}
    for port in cluster.ports:
        assert cluster.ask(port, "SCRIPT", "EXISTS", script.sha) == [True]


async def test_a_script_whose_keys_span_slots_is_refused(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    """The rule every script of the store follows: all its keys in one slot. The client
    refuses to send such a call; a node it is sent to anyway answers CROSSSLOT."""
    script = cluster_client.register_script(WRITE_THEN_COUNT)
    one, other = "a:value", "b:count"
    assert key_slot(one.encode()) != key_slot(other.encode())
    with pytest.raises(RedisClusterException, match="same key slot"):
        await script(keys=[one, other], args=["x"])
    await cluster_client.script_load(WRITE_THEN_COUNT)
    node = cluster_client.get_node_from_key(one)
    with pytest.raises(ClusterCrossSlotError, match="don't hash to the same slot"):
        await cluster_client.execute_command(
            "EVALSHA", script.sha, 2, one, other, "x", target_nodes=node
        )
    assert not await cluster_client.exists(one)


async def test_a_pipeline_across_slots_is_sent_to_each_master(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    keys = [f"piped:{n}" for n in range(30)]
    async with cluster_client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.set(key, key)
            pipe.incr(f"{key}:count")
        pipe.get(keys[0])
        results = await pipe.execute()
    assert results == [True, 1] * len(keys) + [keys[0].encode()]
    assert all(keys_held(cluster, port) for port in cluster.ports)


async def test_a_transaction_is_refused_on_a_cluster(cluster_client: Any) -> None:
    """redis-py's cluster client has no MULTI/EXEC nor WATCH: the store's
    `pipeline(transaction=True)` steps must become scripts on one hash tag."""
    with pytest.raises(RedisClusterException, match="no MULTI/EXEC"):
        cluster_client.pipeline(transaction=True)


async def test_a_script_queued_in_a_pipeline_is_loaded_on_the_masters_that_lack_it(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    """As the episodes' renewal does (`script(..., client=pipe)`): a master that never
    ran the script (or was restarted, or flushed) has it loaded, and the pipeline runs."""
    await cluster_client.script_flush()  # on every master
    script = cluster_client.register_script(WRITE_THEN_COUNT)
    tags = [tag_on(cluster, port) for port in cluster.ports]
    async with cluster_client.pipeline(transaction=False) as pipe:
        for tag in tags:
            await script(keys=[f"{tag}:value", f"{tag}:count"], args=[tag], client=pipe)
        pipe.get("plain")
        results = await pipe.execute()
    assert results == [[1, tag.encode()] for tag in tags] + [None]


async def test_a_publish_from_a_script_on_one_master_reaches_a_subscriber_on_another_node(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    pubsub = await pubsub_of(cluster_client)
    try:
        heard_on = pubsub.connection_pool.connection_kwargs["port"]
        await pubsub.subscribe("md:test-channel")
        publish = cluster_client.register_script(PUBLISH)
        for port in cluster.ports:
            if port == heard_on:
                continue
            tag = tag_on(cluster, port)
            await publish(keys=[f"{tag}:published"], args=["md:test-channel", f"from {port}"])
            message = await until(lambda: pubsub.get_message(timeout=0.5), timeout=5)
            while message["type"] != "message":  # the subscription's confirmation first
                message = await until(lambda: pubsub.get_message(timeout=0.5), timeout=5)
            assert message["data"] == f"from {port}".encode()
    finally:
        await pubsub.aclose()
    numsub = [cluster.ask(p, "PUBSUB", "NUMSUB", "md:test-channel") for p in cluster.ports]
    assert all(n[1] == 0 for n in numsub), f"a subscription outlived its close: {numsub}"


async def test_the_workers_signals_arrive_from_every_master(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    store = SignalStore(cluster_client, make_settings(cluster.url))
    signals = await store.subscribe_signals()
    try:
        publish = cluster_client.register_script(PUBLISH)
        channels = [store.keys.wake_channel, store.keys.cancel_channel, store.keys.cancel_channel]
        sent = []
        for port, channel in zip(cluster.ports, channels, strict=True):
            tag = tag_on(cluster, port, "signal")
            await publish(keys=[f"{tag}:x"], args=[channel, f"x-{port}"])
            wake = channel == store.keys.wake_channel
            sent.append(Signal("wake" if wake else "cancel", f"x-{port}"))
        async with asyncio.timeout(5):
            heard = [await anext(signals) for _ in sent]
        assert sorted(heard, key=repr) == sorted(sent, key=repr)  # shards race each other
    finally:
        await signals.aclose()
    numsub = [cluster.ask(p, "PUBSUB", "NUMSUB", store.keys.wake_channel)[1] for p in cluster.ports]
    assert numsub == [0, 0, 0]


def test_check_reachable_accepts_a_cluster_and_names_a_silent_one_unavailable(
    cluster: LocalCluster,
) -> None:
    check_reachable(cluster.url)
    with pytest.raises(MajordomusError) as raised:
        check_reachable(f"redis+cluster://127.0.0.1:{free_port()}", timeout=0.5, patience=0.5)
    assert raised.value.code == "unavailable"
    assert "unreachable" in str(raised.value)


async def test_a_client_past_its_bound_waits_for_a_free_connection(
    cluster: LocalCluster,
) -> None:
    tag = tag_on(cluster, cluster.ports[0])
    waiting = connect(cluster.url, max_connections=2)
    failing = connect(cluster.url, max_connections=2, wait=False)
    try:
        # Eight blocking reads of 0.2 s on one master, at most two at a time: each waits its
        # turn (none fails for want of a connection).
        read = (waiting.blpop([f"{tag}:empty"], timeout=0.2) for _ in range(8))
        assert await asyncio.gather(*read) == [None] * 8
        node = waiting.get_node_from_key(f"{tag}:empty")
        assert len(node._connections) <= 2
        ended = await asyncio.gather(
            *(failing.blpop([f"{tag}:empty"], timeout=0.2) for _ in range(8)),
            return_exceptions=True,
        )
        assert any(isinstance(e, MaxConnectionsError) for e in ended), ended
        assert issubclass(MaxConnectionsError, UNREACHABLE)
    finally:
        await waiting.aclose()
        await failing.aclose()


async def test_commands_cancelled_mid_round_trip_leave_the_client_working(
    cluster: LocalCluster,
) -> None:
    """A pipeline cancelled as it reads (or a command as it connects) loses its node's
    connection in redis-py 5.3, which then fails every command with MaxConnectionsError
    once it lost as many as its bound (here 3, after a few dozen cancels): this client
    keeps working, and every cancelled task ends (a cancel that lands as a node fails is
    not lost: see the next test)."""
    client = connect(cluster.url, max_connections=3)
    rng = random.Random(7)
    tags = [tag_on(cluster, port) for port in cluster.ports]

    async def busy() -> None:
        while True:
            async with client.pipeline(transaction=False) as pipe:
                for tag in tags:
                    pipe.incr(f"{tag}:n")
                await pipe.execute()
            await client.get(f"{tags[0]}:n")

    try:
        for _ in range(200):
            task = asyncio.create_task(busy())
            await asyncio.sleep(rng.uniform(0, 0.003))
            task.cancel()
            await asyncio.wait([task], timeout=2)
            assert task.done()
        for tag in tags:
            assert int(await client.get(f"{tag}:n") or 0) >= 0
        await asyncio.gather(*(client.incr(f"{tags[1]}:m") for _ in range(10)))
        assert await client.get(f"{tags[1]}:m") == b"10"
    finally:
        await client.aclose()


@pytest.mark.parametrize("failure", [MaxConnectionsError, RedisConnectionError])
async def test_a_cancel_that_lands_as_a_node_fails_is_not_lost(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, failure: type[Exception]
) -> None:
    """asyncio's `gather` (one task per node in a cluster pipeline) hands its caller a
    node's failure instead of the caller's CancelledError when the cancel lands in the same
    turn of the loop as the failure, and the cancel is never delivered. Then redis-py retried
    the pipeline (a ConnectionError) or the client sent it again on fresh nodes (a node out
    of connections, `MaxConnectionsError`, which a node with connections lost to cancels
    raises at once): the task told to stop went on for ever (the previous test's hang, in
    a few of its runs). Here the cancel lands as one node fails: the task ends cancelled,
    nothing sent again."""
    client = connect(cluster.url, max_connections=3)
    tags = [tag_on(cluster, port) for port in cluster.ports]
    try:
        for tag in tags:
            await client.delete(f"{tag}:n")
        failing = client.get_node_from_key(f"{tags[0]}:n").name
        caller: asyncio.Task[Any] | None = None
        acquire = ClusterNode.acquire_connection

        def cancel_as_it_fails(node: ClusterNode) -> Any:
            if node.name == failing and caller is not None and not caller.cancelling():
                caller.cancel()  # while the pipeline's gather waits, in this node's turn
                raise failure("no connection")
            return acquire(node)

        monkeypatch.setattr(ClusterNode, "acquire_connection", cancel_as_it_fails)

        async def pipeline() -> str:
            nonlocal caller
            caller = asyncio.current_task()
            async with client.pipeline(transaction=False) as pipe:
                for tag in tags:
                    pipe.incr(f"{tag}:n")
                await pipe.execute()
            return "went on after its cancel"

        task = asyncio.create_task(pipeline())
        await asyncio.wait([task], timeout=LIVENESS_SECONDS)
        assert task.done() and task.cancelled(), task
        monkeypatch.undo()
        assert [await client.get(f"{tag}:n") for tag in tags] == [None, None, None]
        assert await client.incr(f"{tags[0]}:n") == 1  # the client still serves
    finally:
        await client.aclose()


async def test_a_new_layout_breaks_no_command_in_flight_to_the_other_masters(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that failed a command has the client ask the layout again (here told to
    directly). redis-py made new nodes then and closed the old ones, breaking every command
    in flight to every master, each of which asked yet another layout: with one master
    stalled, a storm in which no partition was served (the stalled shard test's failure
    in CI). The nodes are kept: a blocking read in flight on another master goes on, and
    one layout is asked, not two."""
    client = api_client(cluster.url, max_connections=8, name="md-api")
    read_on, asked_on = cluster.ports[1], cluster.ports[0]
    stream = f"{tag_on(cluster, read_on)}:feed"
    layouts = 0
    ask = NodesManager.initialize

    async def counted(self: NodesManager) -> None:
        nonlocal layouts
        layouts += 1
        await ask(self)

    try:
        assert await client.ping()
        node = client.get_node_from_key(stream)
        monkeypatch.setattr(NodesManager, "initialize", counted)
        with blocking_reads(1500):
            reading = asyncio.create_task(client.xread({stream: "$"}, block=1500))
            await asyncio.sleep(0.2)  # the read waits on its master
            ask_layout_again(client)
            await client.get(f"{tag_on(cluster, asked_on)}:k")  # asks the layout first
            assert await reading == []  # answered as it was (nothing came)
        assert layouts == 1
        assert client.get_node_from_key(stream) is node  # kept, connections and all
    finally:
        await client.aclose()


async def test_what_arqs_worker_calls_on_its_pool_works_on_a_cluster_client(
    cluster: LocalCluster,
) -> None:
    """arq's `Worker` around `MajordomusWorker` writes its health record (ZCARD, PSETEX),
    deletes it and closes the pool (`close(close_connection_pool=True)`)."""
    from arq.worker import Worker, func

    async def nothing(ctx: dict[str, Any]) -> None:
        return None

    client = connect(cluster.url, arq=True)
    worker = Worker(
        functions=[func(nothing, name="nothing")],
        redis_pool=client,
        queue_name="md:{arq}:queue",
        health_check_key="md:health",
        handle_signals=False,
    )
    await worker.record_health()
    assert b"j_complete=0" in await client.get("md:health")
    await worker.close()
    assert client._initialize  # closed
    fresh = connect(cluster.url)
    try:
        assert not await fresh.exists("md:health")
    finally:
        await fresh.aclose()


async def test_a_stopped_master_makes_its_slots_unreachable_then_they_serve_again(
    cluster: LocalCluster, cluster_client: Any
) -> None:
    """A crashed master without a replica: a command for its slots fails at once with the
    store's unreachable error (no hang); once the others mark it failing, its slots are
    down (CLUSTERDOWN, also unreachable) and the others' still served (the cluster runs
    with `cluster-require-full-coverage no`); started again, it serves."""
    lost, kept = cluster.ports[1], cluster.ports[0]
    on_lost, on_kept = f"{tag_on(cluster, lost)}:k", f"{tag_on(cluster, kept)}:k"
    await cluster_client.set(on_lost, "before")
    await cluster_client.set(on_kept, "before")
    cluster.stop(lost)
    try:
        started = time.monotonic()
        with pytest.raises(UNREACHABLE):  # failed, not hung
            await asyncio.wait_for(cluster_client.get(on_lost), LIVENESS_SECONDS)
        print(f"the lost master's command failed in {time.monotonic() - started:.2f} s")

        def marked_failing() -> bool:
            return b"fail" in cluster.ask(kept, "CLUSTER", "NODES")

        await until(lambda: asyncio.to_thread(marked_failing), timeout=15, interval=0.2)
        assert await cluster_client.get(on_kept) == b"before"  # the others' slots serve
        with pytest.raises(UNREACHABLE):
            await cluster_client.get(on_lost)
    finally:
        cluster.start(lost)

    async def serves() -> bool:
        try:
            return bool(await cluster_client.set(on_lost, "after")) and bool(
                await cluster_client.get(on_kept)
            )
        except UNREACHABLE:
            return False

    await until(serves, timeout=20, interval=0.2)
    assert await cluster_client.get(on_lost) == b"after"
    assert await cluster_client.get(on_kept) == b"before"  # the kept master kept its data
    cluster.wait_ok()
