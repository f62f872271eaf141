"""The client majordomus makes from a Sentinel URL, against a real master, replica and three
sentinels (`tests/sentinel/conftest.py`): it reaches the master the sentinels name with
the module's policy (timeouts, keepalive, retries, a bounded pool that waits, the sturdy
connection), runs a script, hears a PUBLISH, passes the start-up check, and after the
master is killed reaches the promoted replica by itself, each call in between failing as
the store's unreachable error; after a switchover it leaves the old master, still alive,
for the new one; an engine and a worker on it run an execution to its end across a
failover. A Sentinel URL that names nothing is `invalid_input`, a host that is no sentinel
too; neither password is ever shown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from arq.connections import ArqRedis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.sentinel import (
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.local.embedded import free_port
from majordomus.model import event_type_of
from majordomus.registry import REGISTRY
from majordomus.store.cluster import is_cluster, pubsub_of
from majordomus.store.connect import api_client, check_reachable, connect
from majordomus.store.connection import STURDY
from majordomus.store.failures import UNREACHABLE
from majordomus.store.policy import (
    CONNECT_TIMEOUT_SECONDS,
    SOCKET_TIMEOUT_SECONDS,
    WAIT_FOR_CONNECTION_SECONDS,
)
from majordomus.store.sentinel import MASTER_RECHECK_SECONDS, SENTINEL_MANAGED
from majordomus.store.urls import is_sentinel_url
from tests.conftest import make_settings, running_worker, until
from tests.sentinel.conftest import PASSWORD, SENTINEL_PASSWORD, SERVICE, LocalSentinels

pytestmark = [pytest.mark.process, pytest.mark.slow]

WRITE_THEN_COUNT = """
redis.call('SET', KEYS[1], ARGV[1])
return {redis.call('INCR', KEYS[2]), redis.call('GET', KEYS[1])}
"""

FAILOVER_BOUND_SECONDS = 20.0
"""How long after the master's kill the client must reach the promoted replica: the
sentinels take about 1 s to call the master down (`down-after-milliseconds`) and 1 to 2 s
more to elect a leader and promote the replica; the rest is slack for a busy machine."""

CALL_BOUND_SECONDS = 10.0
"""How long one call may take while there is no master: its retries (each a new search
of the sentinels) take about 1.5 s at most; past this bound the call counts as hung."""


def master_names(group: LocalSentinels, port: int) -> set[str]:
    return {c["name"] for c in group.ask(port, "CLIENT LIST")}


async def test_a_sentinel_url_gives_a_client_of_the_master_with_the_policy_of_every_client(
    sentinels: LocalSentinels,
) -> None:
    client = connect(sentinels.url, name="probe", max_connections=7)
    try:
        assert isinstance(client, Redis) and not is_cluster(client)
        assert await client.set("where", "master") and await client.get("where") == b"master"
        master = sentinels.master_port()
        assert sentinels.ask(master, "GET", "where") == b"master"
        assert "probe" in master_names(sentinels, master)

        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool) and isinstance(pool, BlockingConnectionPool)
        assert pool.service_name == SERVICE and pool.max_connections == 7
        assert pool.timeout == WAIT_FOR_CONNECTION_SECONDS
        kwargs = pool.connection_kwargs
        assert kwargs["password"] == PASSWORD
        assert kwargs["socket_timeout"] == SOCKET_TIMEOUT_SECONDS
        assert kwargs["socket_connect_timeout"] == CONNECT_TIMEOUT_SECONDS
        assert kwargs["socket_keepalive"] is True and kwargs["retry"] is not None

        # redis-py's sentinel-managed connection (found through the sentinels, READONLY a
        # broken connection), with the sturdy writes, handshake and packing of every client.
        managed = pool.connection_class
        assert managed is SENTINEL_MANAGED[Connection]
        assert issubclass(managed, SentinelManagedConnection)
        # Its reads are the sentinel-managed connection's (READONLY: a broken connection),
        # reached through `SturdyConnection`'s, which only sets a blocking read's timeout.
        assert managed.read_response is STURDY[Connection].read_response
        assert "read_response" in SentinelManagedConnection.__dict__  # next in line
        sturdy = STURDY[Connection]
        for method in ("send_packed_command", "on_connect", "pack_command"):
            assert getattr(managed, method) is getattr(sturdy, method), method

        # The sentinels are asked with their own password, on sturdy connections too.
        for sentinel in pool.sentinel_manager.sentinels:
            assert sentinel.connection_pool.connection_kwargs["password"] == SENTINEL_PASSWORD
            assert sentinel.connection_pool.connection_class is sturdy
    finally:
        await client.aclose()


async def test_the_pool_is_bounded_and_waits_for_a_free_connection(
    sentinels: LocalSentinels,
) -> None:
    client = connect(sentinels.url, name="bounded", max_connections=2)
    try:
        blocked = [client.blpop([f"nothing:{n}"], timeout=0.3) for n in range(4)]
        # Four waits on two connections: each waited its turn (none failed for want of a
        # connection), two at a time.
        assert await asyncio.gather(*blocked) == [None] * 4
        names = [c["name"] for c in sentinels.ask(sentinels.master_port(), "CLIENT LIST")]
        assert names.count("bounded") <= 2
    finally:
        await client.aclose()
    eager = connect(sentinels.url, wait=False, max_connections=1)
    try:
        assert not isinstance(eager.connection_pool, BlockingConnectionPool)
        with pytest.raises(UNREACHABLE, match="Too many connections"):
            await asyncio.gather(eager.blpop(["nothing"], timeout=0.2), eager.ping())
    finally:
        await eager.aclose()


async def test_with_arq_it_is_an_arq_client_of_the_master(sentinels: LocalSentinels) -> None:
    client = connect(sentinels.url, arq=True)
    try:
        assert isinstance(client, ArqRedis)
        assert isinstance(client.connection_pool, SentinelConnectionPool)
        job = await client.enqueue_job("probe", _queue_name="sentinel:arq-probe")
        assert job is not None
        assert await client.zcard("sentinel:arq-probe") == 1
        await client.delete("sentinel:arq-probe", f"arq:job:{job.job_id}")
    finally:
        await client.aclose(close_connection_pool=True)
    api = api_client(sentinels.url, max_connections=5, name="md-api")
    try:
        assert await api.ping() and api.connection_pool.max_connections == 5
    finally:
        await api.aclose()


async def test_a_script_registered_on_the_client_runs_on_the_master(
    sentinels: LocalSentinels,
) -> None:
    client = connect(sentinels.url)
    try:
        script = client.register_script(WRITE_THEN_COUNT)
        await client.delete("script:k", "script:n")
        assert await script(keys=["script:k", "script:n"], args=["one"]) == [1, b"one"]
        sentinels.ask(sentinels.master_port(), "SCRIPT", "FLUSH")  # as a new master has none
        assert await script(keys=["script:k", "script:n"], args=["two"]) == [2, b"two"]
        async with client.pipeline(transaction=True) as pipe:
            await script(keys=["script:k", "script:n"], args=["three"], client=pipe)
            assert await pipe.execute() == [[3, b"three"]]
    finally:
        await client.aclose()


async def test_a_subscription_on_the_client_hears_a_publish(sentinels: LocalSentinels) -> None:
    client = connect(sentinels.url)
    try:
        for pubsub in (client.pubsub(), await pubsub_of(client)):
            await pubsub.subscribe("sentinel:news")
            first = await pubsub.get_message(timeout=2)
            assert first is not None and first["type"] == "subscribe"
            assert await client.publish("sentinel:news", "hello") == 1
            heard = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
            assert heard is not None and heard["data"] == b"hello"
            await pubsub.aclose()
    finally:
        await client.aclose()


def test_the_start_up_check_accepts_a_sentinel_url(sentinels: LocalSentinels) -> None:
    check_reachable(sentinels.url)


def test_the_start_up_check_says_when_the_sentinels_know_no_such_service(
    sentinels: LocalSentinels,
) -> None:
    url = sentinels.url.replace(f"/{SERVICE}?", "/nosuchservice?")
    with pytest.raises(MajordomusError) as raised:
        check_reachable(url, patience=0.5)
    assert raised.value.code == "unavailable"
    assert "No master found for 'nosuchservice'" in str(raised.value)
    assert SENTINEL_PASSWORD not in str(raised.value) and PASSWORD not in str(raised.value)


def test_the_start_up_check_says_when_no_sentinel_answers() -> None:
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/{SERVICE}"
    with pytest.raises(MajordomusError) as raised:
        check_reachable(url, patience=0)
    assert raised.value.code == "unavailable"
    assert "No master found" in str(raised.value)


def test_a_sentinel_url_naming_the_master_itself_is_invalid_input(
    sentinels: LocalSentinels,
) -> None:
    """A host that answers, but is no sentinel: a mistake to name, not an outage."""
    master = sentinels.master_port()
    url = f"redis+sentinel://:{PASSWORD}@127.0.0.1:{master}/{SERVICE}?sentinel_password={PASSWORD}"
    with pytest.raises(MajordomusError) as raised:
        check_reachable(url, patience=0)
    assert raised.value.code == "invalid_input"
    assert "names no Sentinel" in str(raised.value)
    assert PASSWORD not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel://127.0.0.1:26379?sentinel_password=x",
        "redis+sentinel://127.0.0.1:notaport/mymaster",
        "redis+sentinel://127.0.0.1:99999/mymaster",
        "redis+sentinel://127.0.0.1:26379,/mymaster",
        "redis+sentinel:///mymaster",
        "redis+sentinel://127.0.0.1:26379/mymaster/x",
        "redis+sentinel://127.0.0.1:26379/mymaster/0/more",
        "redis+sentinel://127.0.0.1:26379/mymaster?no_such_option=1",
        "rediss+sentinel://127.0.0.1:26379/mymaster?socket_timeout=soon",
    ],
)
def test_a_sentinel_url_that_names_no_master_is_invalid_input(url: str) -> None:
    assert is_sentinel_url(url)
    with pytest.raises(MajordomusError) as raised:
        connect(url)
    assert raised.value.code == "invalid_input"
    assert "is not a Redis URL" in str(raised.value)
    assert "redis+sentinel://host:port" in raised.value.suggestion


def test_a_refused_sentinel_url_shows_neither_password() -> None:
    url = "redis+sentinel://:m-secret@127.0.0.1:26379?sentinel_password=s-secret&x=1"
    with pytest.raises(MajordomusError) as raised:
        connect(url)
    said = str(raised.value)
    assert "m-secret" not in said and "s-secret" not in said
    assert "sentinel_password=***" in said


def test_the_url_gives_the_master_and_the_sentinels_their_own_credentials_and_tls() -> None:
    url = (
        "rediss+sentinel://ada:m%40ster@a.example:26380,[::1],b.example/my%20service/3"
        "?sentinel_username=watcher&sentinel_password=s%26cret&ssl_cert_reqs=none"
    )
    client = connect(url, wait=False)
    pool = client.connection_pool
    assert pool.service_name == "my service"
    assert pool.connection_class is SENTINEL_MANAGED[SSLConnection]
    assert issubclass(pool.connection_class, SentinelManagedSSLConnection)
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("ada", "m@ster", 3)
    assert kwargs["ssl_cert_reqs"] == "none"
    hosts = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in pool.sentinel_manager.sentinels
    ]
    assert hosts == [("a.example", 26380), ("::1", 26379), ("b.example", 26379)]
    for sentinel in pool.sentinel_manager.sentinels:
        theirs = sentinel.connection_pool.connection_kwargs
        assert (theirs["username"], theirs["password"]) == ("watcher", "s&cret")
        assert sentinel.connection_pool.connection_class is STURDY[Connection]  # plain TCP


def test_a_fake_server_still_wins_over_a_sentinel_url() -> None:
    from fakeredis import FakeServer

    client = connect("redis+sentinel://127.0.0.1:26379/mymaster", fake_server=FakeServer())
    assert not isinstance(client.connection_pool, SentinelConnectionPool)


async def test_after_the_master_is_killed_the_same_client_reaches_the_promoted_replica(
    failing_over: LocalSentinels,
) -> None:
    group = failing_over
    client = connect(group.url)
    script = client.register_script(WRITE_THEN_COUNT)
    try:
        assert await script(keys=["k", "n"], args=["before"]) == [1, b"before"]
        assert await client.wait(1, 2000) == 1  # the replica has it: the failover keeps it
        old = await asyncio.to_thread(group.kill_master)
        killed = time.monotonic()
        failures: list[Exception] = []
        longest = 0.0
        while True:
            began = time.monotonic()
            try:
                answer = await asyncio.wait_for(
                    script(keys=["k", "n"], args=["after"]), CALL_BOUND_SECONDS
                )
                break
            except UNREACHABLE as exc:
                failures.append(exc)
            except TimeoutError:
                raise AssertionError(f"a call hung past {CALL_BOUND_SECONDS}s") from None
            finally:
                longest = max(longest, time.monotonic() - began)
            assert time.monotonic() - killed < FAILOVER_BOUND_SECONDS, (
                f"no master within {FAILOVER_BOUND_SECONDS}s: {failures[-3:]}{group.logs()}"
            )
            await asyncio.sleep(0.05)
        took = time.monotonic() - killed
        print(
            f"\nfailover: the client wrote on the promoted replica {took:.2f}s after the kill; "
            f"{len(failures)} calls failed as unreachable in between, the longest {longest:.2f}s"
        )
        assert answer == [2, b"after"]  # the count went on: the write before was kept
        new = group.master_port()
        assert new != old and new in group.server_ports and group.role(new) == "master"
        assert group.ask(new, "GET", "k") == b"after"
        assert failures, "the kill went unnoticed"
        assert longest < CALL_BOUND_SECONDS
        assert await client.get("k") == b"after" and await client.ping()
    finally:
        await client.aclose()


async def test_after_a_switchover_the_client_writes_on_the_new_master_not_the_old_one(
    failing_over: LocalSentinels,
) -> None:
    """`SENTINEL FAILOVER`: the old master lives on, still a master for about 10 s (until
    the sentinels make it a replica and it drops its clients), and takes every write sent
    to it, which the new master never sees. The client's connections to it, idle or
    handed out again, move to the new master within `MASTER_RECHECK_SECONDS` of the
    sentinels naming it."""
    group = failing_over
    client = connect(group.url, max_connections=4)
    try:
        # Four connections in the pool, all on the master.
        await asyncio.gather(*(client.blpop([f"nothing:{n}"], timeout=0.1) for n in range(4)))
        old = group.master_port()
        group.ask(group.sentinel_ports[0], "SENTINEL", "FAILOVER", SERVICE)
        failures: list[Exception] = []

        async def write_for(seconds: float, until_moved: bool = False) -> None:
            began = time.monotonic()
            while time.monotonic() - began < seconds:
                try:
                    await asyncio.wait_for(client.incr("during"), CALL_BOUND_SECONDS)
                except UNREACHABLE as exc:
                    failures.append(exc)
                if until_moved and await asyncio.to_thread(group.master_port) != old:
                    return
                await asyncio.sleep(0.02)

        await write_for(FAILOVER_BOUND_SECONDS, until_moved=True)
        new = group.master_port()
        assert new != old, group.logs()
        await write_for(MASTER_RECHECK_SECONDS + 0.5)  # time passes: the recheck is due

        for _ in range(5):  # every pooled connection handed out again
            await asyncio.gather(*(client.incr("after") for _ in range(4)))
        assert group.ask(new, "GET", "after") == b"20"
        assert group.role(old) == "master", "demoted already: the test proves nothing"
        assert group.ask(old, "GET", "after") is None
        assert all(isinstance(f, UNREACHABLE) for f in failures)
    finally:
        await client.aclose()


async def test_an_execution_runs_to_its_end_through_sentinel_across_a_failover(
    failing_over: LocalSentinels,
) -> None:
    group = failing_over
    # A lease longer than the failover: what the sweeper does with a lease that ran out
    # while there was no master is not what this test is about.
    cfg = make_settings(group.url, lease_seconds=15.0)
    client = connect(group.url, arq=True)
    try:
        engine = Engine(client, REGISTRY, cfg)
        async with running_worker(client, cfg) as worker:
            first = await engine.start("tests.noop", {})
            assert (await engine.wait(first.id, 10_000)).state == "succeeded"

            snap = await engine.start(
                "executions.demonstrate", {"steps": 10, "delay_ms": 300, "log_lines": 1}
            )
            await until(lambda: _past(engine, snap.id, 6))
            old = await asyncio.to_thread(group.kill_master)
            await until(lambda: _promoted(group, old), timeout=FAILOVER_BOUND_SECONDS, interval=0.1)
            done = await engine.wait(snap.id, 30_000)

            assert done.state == "succeeded", done
            events = await _history(engine, snap.id)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            per_step = ["execution.step.started", "execution.log", "execution.step.completed",
                        "execution.progress"]  # fmt: skip
            assert [event_type_of(e) for e in events] == [
                "execution.created", "execution.queued", "execution.started", *per_step * 10,
                "execution.completed",
            ]  # fmt: skip
            assert worker.main_task is not None and not worker.main_task.done()

            after = await engine.start("tests.noop", {})
            assert (await engine.wait(after.id, 10_000)).state == "succeeded"
    finally:
        await client.aclose()


async def _past(engine: Engine, xid: str, sequence: int) -> bool:
    return (await engine.get(xid)).last_sequence >= sequence


async def _promoted(group: LocalSentinels, old: int) -> bool:
    return await asyncio.to_thread(group.discovered_port) not in (None, old)


async def _history(engine: Engine, xid: str) -> list[Any]:
    events: list[Any] = []
    after = 0
    while True:
        page = await engine.events(xid, after=after)
        events += page.events
        if not page.more:
            return events
        after = page.last_sequence
