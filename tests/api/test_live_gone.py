"""A scoped live channel whose execution Redis no longer has (it lost its data, or came
back empty) ends with `stream.closing` and a reason saying so, within a heartbeat, rather
than sending heartbeats for ever (the SPEC's live channel)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import redis as redis_sync

from majordomus.store.keys import Keys
from tests.api.conftest import start


def test_a_scoped_channel_on_an_execution_redis_forgot_closes_saying_so(
    http: httpx.Client, sync_redis: redis_sync.Redis
) -> None:
    snapshot = start(http, "tests.sleepy", seconds=30)
    lines: list[str] = []
    began = time.monotonic()
    with http.stream(
        "GET",
        "/events",
        params={"execution": snapshot["id"]},
        headers={"Accept": "text/event-stream"},
        timeout=30,
    ) as response:
        forgotten = False
        for line in response.iter_lines():  # to the end of the stream
            lines.append(line)
            if not forgotten and line == "event: execution.started":
                # Redis loses it (as a restart without persistence would).
                sync_redis.delete(*Keys("md", 1).execution_keys(snapshot["id"]))
                forgotten = True
            assert time.monotonic() - began < 20, lines
    data = _closing_data(lines)
    assert data["reason"].startswith("gone: Redis no longer has this execution"), lines
    assert not any(line.startswith("event: execution.cancelled") for line in lines)


def _closing_data(lines: list[str]) -> dict[str, Any]:
    import json

    at = next(i for i, line in enumerate(lines) if line == "event: stream.closing")
    payload = next(line for line in lines[at:] if line.startswith("data: "))
    return dict(json.loads(payload.removeprefix("data: "))["data"])


def test_ready_says_when_the_api_found_that_redis_lost_its_data(
    http: httpx.Client, sync_redis: redis_sync.Redis
) -> None:
    epoch = Keys("md", 1).partitions[0].epoch
    began = time.monotonic()
    while not sync_redis.exists(epoch):  # set by the first sweeper turn
        assert time.monotonic() - began < 10
        time.sleep(0.05)
    # Earlier tests of the package may have flushed the database under the API already.
    before = http.get("/api/v1/ready").json().get("redis_data_lost_at")
    time.sleep(0.002)  # a later loss has a later stamp (millisecond precision)
    sync_redis.delete(epoch)  # as a Redis restarted empty leaves it
    while (ready := http.get("/api/v1/ready").json()).get("redis_data_lost_at") in (None, before):
        assert time.monotonic() - began < 20, ready
        time.sleep(0.1)
    assert ready["status"] == "ready" and ready["redis_data_lost_at"].endswith("Z")
