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

from tests.conftest import FOREVER_MS, LIVENESS_SECONDS
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
    time.sleep(0.3)  # for the read to be sent (a thread's command in flight gives no sign)
    assert proxy.cut() == 1
    reader.join(LIVENESS_SECONDS)
    # Failed by the cut: the read's own end, 4 s on, answers None and raises nothing.
    assert failed, "the command in flight did not fail"
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
    print(f"a round trip: {fast * 1000:.1f} ms, {slow * 1000:.0f} ms with 0.1 s each way")
    assert slow >= 0.19  # at least the delay the proxy holds each way (never less)

    # Restored: a delay far past the client's 5 s read timeout is gone, the ping answers.
    proxy.delay(FOREVER_MS / 1000)
    proxy.restore()
    assert client.ping()
    client.close()


def test_a_delay_is_latency_not_a_queue(proxy: FaultProxy) -> None:
    """Pipelined commands in flight together arrive after one delay, not one each."""
    client = client_of(proxy)
    client.ping()
    proxy.delay(0.1)
    pipe = client.pipeline(transaction=False)
    for i in range(1000):  # one each would take 100 s, past the liveness bound
        pipe.set(f"k{i}", i)
    done: list[list[object]] = []
    sender = threading.Thread(target=lambda: done.append(pipe.execute()), daemon=True)
    sender.start()
    sender.join(LIVENESS_SECONDS)
    assert done and len(done[0]) == 1000, "the pipeline waited a delay per command"
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
