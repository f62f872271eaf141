"""Draining a worker (`queue.drain`, `queue.undrain`), with a real API and a real worker
process: what it had taken it finishes, what is started meanwhile waits queued, undrained it
takes that at once, `/api/v1/ready` names it while drained, and a SIGTERM still stops it.

Both processes run under a key prefix of their own (`drain`), deleted before and after, so
the package's API and worker never see this worker, nor take what it leaves queued.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis as redis_sync

from tests.api.conftest import ApiProcess, WorkerChild, start, wait_final

pytestmark = [pytest.mark.process, pytest.mark.slow]

PREFIX = "drain"


def forget(redis_url: str) -> None:
    client = redis_sync.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{PREFIX}:*", count=1000))
    if keys:
        client.unlink(*keys)
    client.close()


def until(check: Callable[[], Any], timeout: float = 15, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.fixture
def cluster(suite_redis_url: str) -> Iterator[tuple[ApiProcess, WorkerChild]]:
    forget(suite_redis_url)
    server = ApiProcess(suite_redis_url, MAJORDOMUS_KEY_PREFIX=PREFIX).launch()
    worker = WorkerChild(suite_redis_url, MAJORDOMUS_KEY_PREFIX=PREFIX)
    try:
        server.wait_ready()
        yield server, worker
    finally:
        worker.stop()
        server.close()
        forget(suite_redis_url)


def the_worker(http: httpx.Client) -> dict[str, Any]:
    def one() -> dict[str, Any] | None:
        workers = http.get("/api/v1/queue/workers").json()["workers"]
        return workers[0] if workers else None

    found: dict[str, Any] = until(one, what="the worker reported itself")
    return found


def state(http: httpx.Client, execution_id: str) -> str:
    return str(http.get("/api/v1/executions/get", params={"id": execution_id}).json()["state"])


def test_a_drained_worker_finishes_its_work_takes_none_until_undrained_and_ready_names_it(
    cluster: tuple[ApiProcess, WorkerChild],
) -> None:
    server, worker = cluster
    with server.client() as http:
        worker_id = the_worker(http)["id"]
        running = start(http, "tests.sleepy", seconds=2)["id"]
        until(lambda: state(http, running) == "running", what="the sleeper running")

        drained = http.post("/api/v1/queue/drain", json={"id": worker_id})
        assert drained.status_code == 200, drained.text
        answer = drained.json()
        assert answer["changed"] is True
        assert answer["worker"]["draining"] is True and answer["worker"]["drained_at"]
        # Its next beat (a fifth of the 3 s lease) sees it: it says it takes nothing more.
        until(lambda: not the_worker(http)["accepting"], what="the worker saying it is drained")
        again = http.post("/api/v1/queue/drain", json={"id": worker_id}).json()
        assert again["changed"] is False

        waiting = start(http, "tests.noop")["id"]
        # What it had taken runs to its end while it is drained...
        assert wait_final(http, running)["state"] == "succeeded"
        # ...and what was started meanwhile waits, queued, however long.
        time.sleep(1.5)  # time passes: it stays queued
        assert state(http, waiting) == "queued"

        ready = http.get("/api/v1/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["draining"] == [worker_id]
        assert ready.json()["workers"] == 1

        undrained = http.post("/api/v1/queue/undrain", json={"id": worker_id})
        assert undrained.status_code == 200, undrained.text
        assert undrained.json()["changed"] is True
        assert undrained.json()["worker"]["draining"] is False
        assert wait_final(http, waiting, timeout_ms=10_000)["state"] == "succeeded"
        assert the_worker(http)["accepting"] is True
        assert http.get("/api/v1/ready").json()["draining"] == []

        unknown = http.post("/api/v1/queue/drain", json={"id": "no-such-worker"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "not_found"


def test_a_drained_worker_still_stops_on_sigterm(
    cluster: tuple[ApiProcess, WorkerChild],
) -> None:
    server, worker = cluster
    with server.client() as http:
        worker_id = the_worker(http)["id"]
        assert http.post("/api/v1/queue/drain", json={"id": worker_id}).status_code == 200
        until(lambda: not the_worker(http)["accepting"], what="the worker saying it is drained")
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(15) == 0, worker.output()
        assert http.get("/api/v1/queue/workers").json()["workers"] == []
