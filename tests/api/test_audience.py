"""What a slow unscoped listener is told it missed is exactly what it missed.

An API of its own, with a small live backlog (`MAJORDOMUS_LIVE_BACKLOG=60`) and a worker,
runs executions that report quickly, watched by five listeners of every execution's events
opened at the feed's end before the load: two read as fast as they can (which, beside a
backlog that small, may still fall behind), three read a little at a time on sockets with
small receive buffers, so the API meets their back-pressure and its backlog moves past them. When the work is done each listener reads the rest at full
speed, and its messages are compared with the store's feed: every entry was either sent
once, in order, or lies in exactly one `stream.lagged` gap whose count is the number of
entries between its two cursors, none of which was sent; a listener told nothing lost
nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import h11
import pytest

from majordomus.engine import LIVE_PATH
from majordomus.store.keys import Keys
from tests.api.conftest import own_deployment, start

PREFIX = "mdaud"
BACKLOG = 60
EXECUTIONS = 12
EVENTS = 150
"""Progress reports of each execution (the feed carries a few more: created, started...)."""


@pytest.fixture
def audience_api(suite_redis_url: str) -> Any:
    with own_deployment(
        suite_redis_url, PREFIX, MAJORDOMUS_LIVE_BACKLOG=str(BACKLOG)
    ) as deployed:
        yield deployed


class Reader(threading.Thread):
    """One listener on a raw socket: slow (a few hundred bytes at a time, pausing) while
    `slow` is set, then at full speed until the stream has been quiet for a second."""

    def __init__(self, port: int, cursor: str, slow: threading.Event | None) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.cursor = cursor
        self.slow = slow
        self.body = bytearray()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001  the test reports it
            self.failure = exc

    def _read(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.slow is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", self.port))
        conn = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method="GET",
            target=f"{LIVE_PATH}?after={self.cursor}",
            headers=[("Host", f"127.0.0.1:{self.port}"), ("Accept", "text/event-stream")],
        )
        sock.sendall(conn.send(request) + conn.send(h11.EndOfMessage()))
        sock.settimeout(1.0)
        try:
            while True:
                slow = self.slow is not None and self.slow.is_set()
                try:
                    data = sock.recv(512 if slow else 65536)
                except TimeoutError:
                    if not slow:
                        return  # quiet for a second with the load done: everything is here
                    continue
                if not data:
                    return
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        break
                    if isinstance(event, h11.Response):
                        assert event.status_code == 200, event
                    elif isinstance(event, h11.Data):
                        self.body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        return
                if slow:
                    time.sleep(0.02)
        finally:
            sock.close()

    def messages(self) -> list[tuple[str | None, str, dict[str, Any]]]:
        out = []
        for block in bytes(self.body).split(b"\n\n"):
            fields: dict[str, str] = {}
            for line in block.decode().splitlines():
                name, _, value = line.partition(": ")
                fields[name] = value
            if "event" in fields:
                out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
        return out


@pytest.mark.slow
@pytest.mark.process
def test_every_listener_is_told_exactly_what_it_missed(audience_api: Any) -> None:
    server, client = audience_api
    feed = Keys(PREFIX, 1).partitions[0].feed
    newest = client.xrevrange(feed, "+", "-", count=1)
    cursor = newest[0][0].decode() if newest else "0-0"
    slow = threading.Event()
    slow.set()
    readers = [Reader(server.port, cursor, None) for _ in range(2)]
    readers += [Reader(server.port, cursor, slow) for _ in range(3)]
    for reader in readers:
        reader.start()
    time.sleep(0.5)  # every channel open (its replay from `cursor` covers what came first)
    with server.client() as http:
        ids = [start(http, "tests.chatty", events=EVENTS)["id"] for _ in range(EXECUTIONS)]
        for execution_id in ids:
            answer = http.get(
                "/api/v1/executions/wait", params={"id": execution_id, "timeout_ms": 30000}
            )
            assert answer.json()["state"] == "succeeded", answer.text
    slow.clear()  # the slow ones read the rest at full speed
    for reader in readers:
        reader.join(60)
        assert not reader.is_alive() and reader.failure is None, reader.failure

    stored = [(sid.decode(), fields) for sid, fields in client.xrange(feed, f"({cursor}", "+")]
    order = {sid: i for i, (sid, _) in enumerate(stored)}
    assert len(stored) >= EXECUTIONS * EVENTS
    lagged_listeners = 0
    for reader in readers:
        messages = reader.messages()
        assert messages and messages[0][1] == "stream.ready"
        covered: list[int] = []
        told = 0
        last_sent: str | None = cursor
        for sse_id, kind, data in messages[1:]:
            if kind == "stream.lagged":
                gap = data["data"]
                # The gap starts at the last event sent, and holds exactly `dropped`.
                assert gap["after"] == last_sent, (gap, last_sent)
                inside = client.xrange(feed, f"({gap['after']}", gap["upto"])
                assert len(inside) == gap["dropped"] > 0
                covered += [order[sid.decode()] for sid, _ in inside]
                told += gap["dropped"]
                last_sent = gap["upto"]
            elif kind.startswith("execution."):
                assert sse_id is not None
                covered.append(order[sse_id])
                last_sent = sse_id
        # Every stored entry once, in the feed's order: sent, or inside a gap it was told of.
        # (So one told nothing lost nothing.)
        assert covered == list(range(len(stored))), "a listener lost or repeated entries"
        lagged_listeners += told > 0
    assert lagged_listeners >= 1, "no slow listener fell behind the backlog: nothing was tested"


@pytest.mark.skipif(not hasattr(socket, "TCP_NOTSENT_LOWAT"), reason="Linux and macOS only")
def test_the_api_socket_bounds_what_the_kernel_holds_for_a_slow_client() -> None:
    from majordomus.cli.processes import UNSENT_BYTES, _listening

    listening = _listening("127.0.0.1", 0)
    client = socket.create_connection(listening.getsockname())
    accepted, _ = listening.accept()
    try:
        held = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT)
        assert held == UNSENT_BYTES  # each connection takes it from the listening socket
    finally:
        for sock in (accepted, client, listening):
            sock.close()
