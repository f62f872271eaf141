"""`serve`'s live delivery process (`api.live.apart`, `api.live.delivery`), as a client and an
operator meet it: real `majordomus serve` processes, a real worker, real sockets.

A channel the API admits is handed to the delivery process, which writes it (with
`Connection: close`, which uvicorn does not send) and logs its access line; what a client
receives is what the store holds. When the delivery process dies, the channels it held end at
once and a new one takes over; when `serve` stops, its channels end with `stream.closing`;
`MAJORDOMUS_LIVE_APART=0` keeps delivery in the API.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis as redis_sync
from httpx_sse import EventSource

from majordomus.api.live.feed import REST_SECONDS
from tests.api.conftest import TERMINAL, ApiProcess, Message, WorkerChild, start, wait_final

ACCEPT = {"Accept": "text/event-stream"}


def delivery_pid(client: httpx.Client, timeout: float = 20) -> int:
    """The delivery process's pid, once the API says it takes connections."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = client.get("/api/v1/live").json().get("delivery_pid")
        if pid:
            return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no delivery process took the live channels within {timeout}s")


def held_by(pid: int, port: int) -> int:
    """How many established connections to the API's `port` process `pid` holds."""
    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def stored_events(client: httpx.Client, execution_id: str) -> list[dict[str, Any]]:
    page = client.get("/api/v1/executions/events", params={"id": execution_id}).json()
    return list(page["events"])


def until_logged(server: ApiProcess, text: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = server.output()
        if text in output:
            return output
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged within {timeout}s:\n{server.output()[-3000:]}")


@pytest.fixture
def own_api(suite_redis_url: str, worker_process_for_api: WorkerChild) -> Any:
    servers: list[ApiProcess] = []

    def make(**env: str) -> ApiProcess:
        server = ApiProcess(suite_redis_url, **env).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def test_a_channel_is_written_by_the_delivery_process_and_holds_what_the_store_holds(
    api: ApiProcess, http: httpx.Client
) -> None:
    pid = delivery_pid(http)
    child = psutil.Process(pid)
    assert child.ppid() == api.pid
    assert child.nice() >= psutil.Process(api.pid).nice() + 10  # the work comes first
    if hasattr(os, "SCHED_IDLE"):  # and on Linux, only on a core nothing else wants
        assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists():  # in a scheduling group of its own, of the lowest weight
        assert os.getsid(pid) == pid
        assert group.read_text().split()[-1] == "19", group.read_text()
    snapshot = start(http, "executions.demonstrate", steps=4, delay_ms=100)
    received: list[Message] = []
    with http.stream(
        "GET", "/events", params={"execution": snapshot["id"]}, headers=ACCEPT
    ) as response:
        assert response.status_code == 200
        assert response.headers["connection"] == "close"  # not uvicorn's answer: the child's
        assert held_by(pid, api.port) >= 1
        for sse in EventSource(response).iter_sse():
            received.append(Message(sse.event, sse.data, sse.id or None))
            if sse.event == "stream.closing":
                break
    assert received[0].event == "stream.ready"
    assert received[-1].event == "stream.closing"
    assert received[-1].data["data"]["reason"] == "finished"
    events = [m.data for m in received if not m.is_control]
    assert events == stored_events(http, snapshot["id"])
    assert events[-1]["type"] in TERMINAL
    # Its access line, with its status, is the delivery process's; the API logs none for it.
    output = until_logged(api, "GET /events 200")
    assert "GET /events 0 " not in output


def test_the_unscoped_channel_through_the_delivery_process_misses_nothing(
    api: ApiProcess, http: httpx.Client
) -> None:
    delivery_pid(http)
    ids: list[str] = []
    ended: set[str] = set()
    seen: dict[str, list[dict[str, Any]]] = {}
    with http.stream("GET", "/events", headers=ACCEPT) as response:
        assert response.headers["connection"] == "close"
        for sse in EventSource(response).iter_sse():
            if sse.event == "stream.ready":
                ids = [
                    start(http, "executions.demonstrate", steps=3, delay_ms=20)["id"]
                    for _ in range(3)
                ]
                continue
            message = Message(sse.event, sse.data, sse.id or None)
            assert not message.is_control, message
            event = message.data
            if event["execution_id"] in ids:
                seen.setdefault(event["execution_id"], []).append(event)
                if event["type"] in TERMINAL:
                    ended.add(event["execution_id"])
            if ids and ended == set(ids):
                break
    for execution_id in ids:
        assert seen[execution_id] == stored_events(http, execution_id)


def test_a_dead_delivery_process_ends_its_channels_and_a_new_one_takes_over(
    own_api: Any,
) -> None:
    server: ApiProcess = own_api()
    with server.client() as client:
        first = delivery_pid(client)
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            assert response.headers["connection"] == "close"
            lines = response.iter_lines()
            assert next(lines).startswith("event: stream.ready")
            held = time.monotonic()
            psutil.Process(first).kill()
            # The API ends the connection the dead process held: the client is not left
            # waiting on a silent stream (it reconnects with its cursor).
            with pytest.raises(httpx.HTTPError):
                for _ in lines:
                    pass
            assert time.monotonic() - held < 5
        until_logged(server, "live delivery: its process ended")
        second = delivery_pid(client)
        assert second != first
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            assert response.status_code == 200
            assert response.headers["connection"] == "close"
            assert held_by(second, server.port) == 1


def signalled_while_listening(server: ApiProcess, sig: int) -> tuple[int, list[Message]]:
    """The delivery process's pid, and what a handed channel received when `serve` was
    sent `sig` right after its `stream.ready`, to the channel's end."""
    with server.client() as client:
        pid = delivery_pid(client)
        messages: list[Message] = []
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            assert response.headers["connection"] == "close"
            for sse in EventSource(response).iter_sse():
                messages.append(Message(sse.event, sse.data, sse.id or None))
                if sse.event == "stream.ready":
                    assert server.process is not None
                    server.process.send_signal(sig)
    return pid, messages


def test_serve_stopping_ends_the_handed_channels_with_stream_closing(own_api: Any) -> None:
    server: ApiProcess = own_api()
    pid, messages = signalled_while_listening(server, signal.SIGTERM)
    assert messages[-1].event == "stream.closing"
    assert messages[-1].data["data"]["reason"] == "server stopping"
    assert server.stop(timeout=15) == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_live_idle_off_keeps_the_delivery_process_niced_only(own_api: Any) -> None:
    server: ApiProcess = own_api(MAJORDOMUS_LIVE_IDLE="0")
    with server.client() as client:
        child = psutil.Process(delivery_pid(client))
        assert child.nice() >= psutil.Process(server.pid).nice() + 10
        assert os.sched_getscheduler(child.pid) == os.SCHED_OTHER
        assert os.getsid(child.pid) == os.getsid(server.pid)  # in serve's group


def test_live_apart_off_keeps_delivery_in_the_api(own_api: Any) -> None:
    server: ApiProcess = own_api(MAJORDOMUS_LIVE_APART="0")
    with server.client() as client:
        snapshot = start(client, "executions.demonstrate", steps=2, delay_ms=20)
        wait_final(client, snapshot["id"])
        with client.stream(
            "GET", "/events", params={"execution": snapshot["id"]}, headers=ACCEPT
        ) as response:
            assert "connection" not in response.headers
            events = [
                sse.event
                for sse in EventSource(response).iter_sse()
                if not sse.event.startswith("stream.")
            ]
        assert events[-1] in TERMINAL
        assert "delivery_pid" not in client.get("/api/v1/live").json()
    children = psutil.Process(server.pid).children()
    assert not any("live.delivery" in " ".join(c.cmdline()) for c in children)


def test_a_killed_serve_leaves_no_delivery_process_and_its_channels_are_told(
    own_api: Any,
) -> None:
    server: ApiProcess = own_api()
    # SIGKILL: no word to the delivery process, whose link to the API ends.
    pid, messages = signalled_while_listening(server, signal.SIGKILL)
    assert messages[-1].event == "stream.closing"
    assert messages[-1].data["data"]["reason"] == "server stopping"
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the delivery process outlived its serve"
        time.sleep(0.05)


def feed_reads(redis_url: str, pid: int, who: str = "majordomus-live") -> int:
    """Process `pid`'s Redis connections blocked in a read (its feed reader's): the delivery
    process's (`majordomus-live`), or the API's (`majordomus-api`)."""
    client = redis_sync.Redis.from_url(redis_url)
    try:
        return sum(
            1
            for c in client.client_list()
            if c.get("name", "") == f"{who}:{socket.gethostname()}:{pid}"
            and "b" in c.get("flags", "")
        )
    finally:
        client.close()


def until_reads(redis_url: str, pid: int, count: int, who: str = "majordomus-live") -> None:
    deadline = time.monotonic() + REST_SECONDS + 5
    while (found := feed_reads(redis_url, pid, who)) != count:
        assert time.monotonic() < deadline, f"{who} {pid}: {found} feed reads, not {count}"
        time.sleep(0.05)


def test_the_feed_is_read_only_while_someone_listens(own_api: Any, suite_redis_url: str) -> None:
    server: ApiProcess = own_api()
    with server.client() as client:
        pid = delivery_pid(client)
        time.sleep(0.5)
        # An audience of none costs nothing: neither the API nor the delivery process reads.
        assert feed_reads(suite_redis_url, pid) == 0
        assert feed_reads(suite_redis_url, server.pid, "majordomus-api") == 0
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            lines = response.iter_lines()  # kept: an iterator dropped closes the response
            assert next(lines).startswith("event: stream.ready")
            until_reads(suite_redis_url, pid, 1)
            # Handed over: the API itself still reads nothing.
            assert feed_reads(suite_redis_url, server.pid, "majordomus-api") == 0
            # The operator's figures count it: the API's channels, and its listeners metric.
            assert client.get("/api/v1/live").json()["channels"] == 1
            assert "majordomus_live_listeners 1.0" in client.get("/metrics").text.splitlines()
        # The last listener gone, the reader rests; the next channel starts it again and
        # is sent what happens from then on.
        until_reads(suite_redis_url, pid, 0)
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("event: stream.ready")
            until_reads(suite_redis_url, pid, 1)
            snapshot = start(client, "executions.demonstrate", steps=1)
            for line in lines:
                if line.startswith("data:") and snapshot["id"] in line:
                    break


def test_a_resting_api_follows_the_feed_for_its_own_channels_and_long_polls(
    own_api: Any, suite_redis_url: str
) -> None:
    server: ApiProcess = own_api(MAJORDOMUS_LIVE_APART="0")
    with server.client() as client:
        time.sleep(0.5)
        assert feed_reads(suite_redis_url, server.pid, "majordomus-api") == 0
        with client.stream("GET", "/events", headers=ACCEPT) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("event: stream.ready")
            until_reads(suite_redis_url, server.pid, 1, "majordomus-api")
        until_reads(suite_redis_url, server.pid, 0, "majordomus-api")
        # A long poll wakes the resting reader and is answered from it.
        snapshot = start(client, "executions.demonstrate", steps=4, delay_ms=1000)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                client.get,
                "/api/v1/executions/wait",
                params={"id": snapshot["id"], "timeout_ms": 30000},
            )
            until_reads(suite_redis_url, server.pid, 1, "majordomus-api")
            answer = waiting.result(timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "succeeded"
        until_reads(suite_redis_url, server.pid, 0, "majordomus-api")
