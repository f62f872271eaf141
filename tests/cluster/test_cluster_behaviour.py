"""majordomus on the suite's three-master Redis Cluster, as on one Redis: an API and two
workers on `redis+cluster://` with three partitions (one on each master) start, run,
list, follow, page, cancel, resume the live channel and sweep a killed worker's work.

Every script of a step runs on the master of its partition's slot; a script touching a
key of another slot would fail there (CROSSSLOT, or "a non local key"), which the
invariants of each test would show as a failed execution or an error answer.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from majordomus.store.keys import Keys, slot_of
from tests.api.conftest import (
    TERMINAL,
    ApiProcess,
    Message,
    WorkerChild,
    read_stream,
    start,
    wait_final,
)
from tests.cluster.conftest import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.process]

PARTITIONS = 3
ENV = {"MAJORDOMUS_PARTITIONS": str(PARTITIONS), "MAJORDOMUS_LEASE_SECONDS": "3"}


class Deployment:
    """An API and workers on the cluster, and what the tests read of it."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.api = ApiProcess(cluster.url, **ENV).start()
        self.workers = [WorkerChild(cluster.url, **ENV) for _ in range(2)]
        self.keys = Keys("md", PARTITIONS)
        self.until(lambda: self.workers_seen() >= 2, 30, "two workers reporting")

    def workers_seen(self) -> int:
        slot = slot_of(self.keys.workers)
        return int(self.cluster.ask(self.cluster.owner(slot), "ZCARD", self.keys.workers))

    def until(self, check: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                logs = "\n".join(w.output()[-2000:] for w in self.workers)
                raise AssertionError(f"not within {timeout}s: {what}\n{logs}\n{self.api.output()[-2000:]}")
            time.sleep(0.05)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.api.close()


def test_executions_spread_over_the_shards_run_list_and_page_as_on_one_redis(
    deployment: Deployment,
) -> None:
    keys, cluster = deployment.keys, deployment.cluster
    # One partition on each master: the tags deal the slot ranges out as the cluster does.
    owners = {cluster.owner(slot_of(p.tag)) for p in keys.partitions}
    assert owners == set(cluster.ports)
    with deployment.api.client() as http:
        started = [start(http, "executions.demonstrate", steps=2, delay_ms=20) for _ in range(24)]
        assert {keys.partition_of(s["id"]).index for s in started} == set(range(PARTITIONS))
        ends = [wait_final(http, s["id"]) for s in started]
        assert [e["state"] for e in ends] == ["succeeded"] * 24
        # Every master holds executions of its own.
        assert all(int(cluster.ask(port, "DBSIZE")) > 10 for port in cluster.ports)
        # The list merges the partitions, newest first, and pages on.
        first = http.get("/api/v1/executions", params={"limit": 10}).json()
        rest = http.get(
            "/api/v1/executions", params={"limit": 30, "before": first["executions"][-1]["id"]}
        ).json()
        listed = [x["id"] for x in first["executions"] + rest["executions"]]
        assert sorted(listed) == sorted(s["id"] for s in started)
        # Newest first: by creation time (two made in the same millisecond in either order).
        created = {s["id"]: s["created_at"] for s in started}
        shown = [created[i] for i in listed]
        assert shown == sorted(shown, reverse=True)
        # One execution's history, paged by cursor.
        one = started[5]["id"]
        page = http.get("/api/v1/executions/events", params={"id": one, "after": 0, "limit": 3})
        body = page.json()
        assert [e["sequence"] for e in body["events"]] == [1, 2, 3] and body["more"]
        tail = http.get(
            "/api/v1/executions/events", params={"id": one, "after": body["events"][-1]["sequence"]}
        ).json()
        types = [e["type"] for e in body["events"] + tail["events"]]
        assert types[0] == "execution.created" and types[-1] == "execution.completed"
        queue = http.get("/api/v1/queue").json()
        assert (queue["queued"], queue["running"]) == (0, 0)
        assert len(queue["workers"]) == 2


def test_follow_cancel_and_resume_the_live_channel_across_the_shards(
    deployment: Deployment,
) -> None:
    keys = deployment.keys
    with deployment.api.client() as http:
        # Follow one execution live to its end.
        demo = start(http, "executions.demonstrate", steps=3, delay_ms=50)
        status, followed = read_stream(
            http,
            params={"execution": demo["id"]},
            until=lambda m: not m.is_control and m.data["type"] in TERMINAL,
        )
        assert status == 200
        seqs = [m.data["sequence"] for m in followed if not m.is_control]
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 10

        # Cancel one running, wherever it lives.
        sleepy = start(http, "tests.sleepy", seconds=30)
        deployment.until(
            lambda: http.get("/api/v1/executions/get", params={"id": sleepy["id"]}).json()["state"]
            == "running",
            20,
            "the sleepy one running",
        )
        assert http.post("/api/v1/executions/cancel", json={"id": sleepy["id"]}).status_code == 200
        assert wait_final(http, sleepy["id"])["state"] == "cancelled"  # not its 30 s run's end

        # Every execution's events at once, then resumed with Last-Event-ID mid-way.
        ids: list[str] = []
        done: set[str] = set()

        def started_then_done(message: Message) -> bool:
            if message.event == "stream.ready":
                while len(ids) < 6 or len({keys.partition_of(x).index for x in ids}) < PARTITIONS:
                    ids.append(start(http, "executions.demonstrate", steps=2, delay_ms=20)["id"])
            elif not message.is_control and message.data["type"] in TERMINAL:
                done.add(message.data["execution_id"])
            return bool(ids) and done >= set(ids)

        status, everything = read_stream(http, until=started_then_done)
        assert status == 200
        ours = [m for m in everything if not m.is_control and m.data["execution_id"] in ids]
        middle = len(ours) // 2
        left = [(m.data["execution_id"], m.data["sequence"]) for m in ours[middle:]]
        seen: list[tuple[str, int]] = []

        def all_seen(message: Message) -> bool:
            if not message.is_control and message.data["execution_id"] in ids:
                seen.append((message.data["execution_id"], message.data["sequence"]))
            return len(seen) >= len(left)

        status, _ = read_stream(
            http, headers={"Last-Event-ID": ours[middle - 1].id or ""}, until=all_seen
        )
        assert status == 200 and sorted(seen) == sorted(left) and len(set(seen)) == len(seen)


def test_a_killed_workers_executions_are_failed_by_the_sweeper_on_the_cluster(
    deployment: Deployment,
) -> None:
    with deployment.api.client() as http:
        victims = [start(http, "tests.sleepy", seconds=60) for _ in range(6)]

        def all_running() -> bool:
            states = [
                http.get("/api/v1/executions/get", params={"id": v["id"]}).json() for v in victims
            ]
            return all(s["state"] == "running" for s in states)

        deployment.until(all_running, 20, "the victims running")
        held = {
            http.get("/api/v1/executions/get", params={"id": v["id"]}).json()["worker"]
            for v in victims
        }
        for worker in deployment.workers:
            worker.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        ends = [wait_final(http, v["id"], timeout_ms=30_000) for v in victims]
        assert {e["state"] for e in ends} == {"failed"}, ends
        assert {e["error"]["code"] for e in ends} == {"unavailable"}
        print(f"the killed workers' executions ended {time.monotonic() - killed:.1f} s after")
        assert held  # they were held by the workers killed
        # New work runs once a worker is back.
        deployment.workers = [WorkerChild(deployment.cluster.url, **ENV)]
        after = start(http, "tests.noop")
        assert wait_final(http, after["id"])["state"] == "succeeded"
