"""Redis going away under a running API: every route that needs it answers 503
`unavailable` (never a traceback), the process stays up, and service returns by itself when
Redis does, an open live channel included. The test runs a redis-server of its own."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource

from majordomus.local.embedded import EmbeddedRedis
from tests.api.conftest import ApiProcess, start
from tests.api.test_http import assert_envelope

SOME_ID = "x-20260908T010203Z-0a1b2c3d"


def follow_feed(server: ApiProcess, out: queue.Queue[Any], stop: threading.Event) -> None:
    """An unscoped listener that stays connected and reports what it sees."""
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5, read=60)) as client:
        with client.stream("GET", "/events", headers={"Accept": "text/event-stream"}) as response:
            for sse in EventSource(response).iter_sse():
                out.put((sse.event, json.loads(sse.data)))
                if stop.is_set():
                    return


@pytest.mark.usefixtures("spawns")
def test_redis_stopped_answers_503_and_service_returns_by_itself() -> None:
    redis_server = EmbeddedRedis().start()
    port = redis_server.port
    server = ApiProcess(redis_server.url).start()
    seen: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    listener = threading.Thread(target=follow_feed, args=(server, seen, stop), daemon=True)
    try:
        with server.client() as client:
            not_ready = client.get("/api/v1/ready")
            assert "no worker" in assert_envelope(not_ready, 503, "unavailable")["message"]
            before = start(client, "executions.demonstrate", steps=1)
            listener.start()
            assert seen.get(timeout=10)[0] == "stream.ready"

            redis_server.stop()
            down = [
                client.get("/api/v1/executions"),
                client.get("/api/v1/executions/get", params={"id": before["id"]}),
                client.get("/api/v1/executions/events", params={"id": before["id"]}),
                client.post("/api/v1/executions/start", json={"capability": "tests.noop"}),
                client.post("/api/v1/executions/cancel", json={"id": SOME_ID}),
                client.get("/api/v1/ready"),
                client.get("/events", params={"execution": before["id"]}),
            ]
            for response in down:
                assert_envelope(response, 503, "unavailable")
            assert client.get("/api/v1/live").status_code == 200
            assert client.get("/api/v1/executions/protocol").status_code == 200  # needs no Redis
            assert listener.is_alive()  # the open channel waits it out

            redis_server = EmbeddedRedis(port=port).start()
            deadline = time.monotonic() + 20
            while client.get("/api/v1/executions").status_code != 200:
                assert time.monotonic() < deadline, "service did not return with Redis"
                time.sleep(0.1)
            after = start(client, "executions.demonstrate", steps=1)
            page = client.get("/api/v1/executions/events", params={"id": after["id"]}).json()
            assert [e["sequence"] for e in page["events"]] == [1, 2]
            # The channel that stayed open through the outage carries the new execution.
            deadline = time.monotonic() + 20
            while True:
                event, data = seen.get(timeout=max(0.1, deadline - time.monotonic()))
                if event == "execution.queued" and data["execution_id"] == after["id"]:
                    break
    finally:
        stop.set()
        server.close()
        redis_server.stop()
