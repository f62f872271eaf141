"""The fault proxy itself, with a real Redis client through it: a cut breaks the open
connection, refusing keeps it broken, restoring lets the client back, and a delay is there
to measure, and a lost answer is a command carried out. The scenarios rely on exactly these
five behaviours."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.faults.conftest import RedisServer
from tests.faults.proxy import FaultProxy

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    yield s
    s.close()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[FaultProxy]:
    p = FaultProxy(server.port)
    yield p
    p.close()


def client_of(proxy: FaultProxy) -> redis.Redis:
    return redis.Redis(port=proxy.port, socket_timeout=5, socket_connect_timeout=2)


def test_a_client_through_the_proxy_reaches_redis(proxy: FaultProxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    client.set("k", b"v" * 200_000)  # more than one chunk each way
    assert client.get("k") == b"v" * 200_000
    assert proxy.open_connections == 1
    client.close()


def test_a_cut_fails_the_command_in_flight_and_the_client_reconnects_by_itself(
    proxy: FaultProxy,
) -> None:
    client = client_of(proxy)
    failed: list[BaseException] = []

    def block() -> None:
        try:
            client.blpop(["nothing"], timeout=4)
        except redis.ConnectionError as exc:
            failed.append(exc)

    reader = threading.Thread(target=block)
    reader.start()
    time.sleep(0.3)
    began = time.monotonic()
    assert proxy.cut() == 1
    reader.join(5)
    assert failed, "the command in flight did not fail"
    assert time.monotonic() - began < 1
    # Nothing refused: the next command reconnects (redis-py checks an idle connection
    # before it uses it, so a cut between commands alone goes unnoticed).
    assert client.ping()
    client.close()


def test_refusing_keeps_every_new_connection_out_until_restored(proxy: FaultProxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    proxy.outage()
    for _ in range(3):
        with pytest.raises(redis.ConnectionError):
            client.ping()
    other = client_of(proxy)
    with pytest.raises(redis.ConnectionError):
        other.ping()
    proxy.restore()
    assert client.ping()
    assert other.ping()
    client.close()
    other.close()


def test_a_delay_adds_latency_each_way_and_restore_removes_it(proxy: FaultProxy) -> None:
    client = client_of(proxy)
    client.ping()
    began = time.monotonic()
    for _ in range(5):
        client.ping()
    fast = (time.monotonic() - began) / 5

    proxy.delay(0.1)
    began = time.monotonic()
    for _ in range(5):
        client.ping()
    slow = (time.monotonic() - began) / 5
    assert 0.19 <= slow < 0.4, f"a round trip took {slow:.3f}s with 0.1s each way"

    proxy.restore()
    began = time.monotonic()
    client.ping()
    assert time.monotonic() - began < 0.05 + fast * 5
    client.close()


def test_a_delay_is_latency_not_a_queue(proxy: FaultProxy) -> None:
    """Pipelined commands in flight together arrive after one delay, not one each."""
    client = client_of(proxy)
    client.ping()
    proxy.delay(0.1)
    pipe = client.pipeline(transaction=False)
    for i in range(200):
        pipe.set(f"k{i}", i)
    began = time.monotonic()
    pipe.execute()
    assert time.monotonic() - began < 0.6
    client.close()


def test_proxies_are_independent(server: RedisServer) -> None:
    one, two = FaultProxy(server.port), FaultProxy(server.port)
    try:
        a, b = client_of(one), client_of(two)
        a.ping()
        b.ping()
        one.outage()
        with pytest.raises(redis.ConnectionError):
            a.ping()
        assert b.ping()
        a.close()
        b.close()
    finally:
        one.close()
        two.close()


def test_a_lost_answer_means_the_command_was_carried_out(
    proxy: FaultProxy, server: RedisServer
) -> None:
    direct = redis.Redis(port=server.port)
    direct.delete("lost")
    client = client_of(proxy)
    client.ping()
    proxy.lose_answers(1.0)
    with pytest.raises(redis.ConnectionError):
        client.incr("lost")
    assert direct.get("lost") == b"1"  # done, though its client never heard so
    assert proxy.answers_lost == 1
    proxy.restore()
    assert client.incr("lost") == 2
    client.close()
    direct.close()
