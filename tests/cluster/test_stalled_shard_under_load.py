"""One master of the three stopped (SIGSTOP) for 10 s under load, an API and two workers on
the cluster with three partitions: starts keep being answered within the API's bound and
go to the partitions that answer, the workers keep running the healthy partitions' work,
and once the master is back nothing is lost or stuck."""

from __future__ import annotations

import re
import signal
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from majordomus.store.keys import slot_of
from majordomus.store.policy import API_ANSWER_BOUND_SECONDS
from tests.cluster.conftest import LocalCluster
from tests.cluster.test_cluster_behaviour import Deployment

pytestmark = [pytest.mark.slow, pytest.mark.process]

RATE = 20
"""Starts a second."""
SECONDS = 16
STALL_AT, STALL_SECONDS = 3.0, 10.0


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


_UNKNOWN_START = re.compile(r"\(as ([^)\s]+)\)")
"""Where a 503 of a start Redis did not answer names the execution (`start_unknown`)."""


def _timeline(
    answers: list[tuple[float, int, float, str, str]],
    keys: Any,
    stall_from: float,
    stall_to: float,
    stalled: set[int],
) -> str:
    """The answers sent from 2 s before the stall to 2 s after it, one a line: sent at
    (seconds from the stall's start), status, seconds taken, the partition (`*` the stalled
    one; `?` a refusal that names no execution), and a refusal's words; so that a failure
    in CI explains itself."""
    lines = [
        f"timeline: the stall from 0.00 to {stall_to - stall_from:.2f} s; "
        f"stalled partition(s) {sorted(stalled)}; sent, status, taken, partition"
    ]
    for sent, status, taken, execution_id, said in answers:
        if not stall_from - 2 <= sent <= stall_to + 2:
            continue
        index = keys.partition_of(execution_id).index if execution_id else None
        where = "?" if index is None else f"{index}{'*' if index in stalled else ''}"
        lines.append(
            f"  {sent - stall_from:+7.2f}  {status}  {taken:5.2f} s  p{where:<3} {said[:160]}"
        )
    return "\n".join(lines)


def test_a_master_stalled_under_load_costs_its_own_partition_only(
    deployment: Deployment, cluster: LocalCluster
) -> None:
    keys = deployment.keys
    # The master that holds the fewest keys outside the partitions (the workers' set and
    # presences, the sweeper's lock): a worker whose presence is there cannot beat.
    ids = [
        m.decode()
        for m in cluster.ask(cluster.owner(slot_of(keys.workers)), "ZRANGE", keys.workers, 0, -1)
    ]
    shared = [keys.workers, keys.sweeper_lock, *(keys.worker(i) for i in ids)]
    owners = [cluster.owner(slot_of(k)) for k in shared]
    port = min(cluster.ports, key=owners.count)
    stalled = {p.index for p in keys.partitions if cluster.owner(slot_of(p.tag)) == port}
    answers: list[tuple[float, int, float, str, str]] = []
    """(sent at, status, seconds to answer, id, a refusal's words) of every start (a
    refusal's id where it names one)."""

    def load() -> None:
        body = {"capability": "tests.noop", "input": {}}
        timeout = httpx.Timeout(API_ANSWER_BOUND_SECONDS + 2.0)
        with httpx.Client(base_url=deployment.api.url, timeout=timeout) as http:
            t0 = time.monotonic()
            for n in range(RATE * SECONDS):
                delay = t0 + n / RATE - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                sent, started = time.time(), time.monotonic()
                reply = http.post("/api/v1/executions/start", json=body)
                taken = time.monotonic() - started
                if reply.status_code == 200:
                    answers.append((sent, 200, taken, reply.json().get("id", ""), ""))
                else:
                    named = _UNKNOWN_START.search(reply.text)
                    said = reply.text.replace("\n", " ")
                    answers.append(
                        (sent, reply.status_code, taken, named[1] if named else "", said)
                    )

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    time.sleep(STALL_AT)
    process = cluster.processes[port]
    stall_from = time.time()
    process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(STALL_SECONDS)
    finally:
        process.send_signal(signal.SIGCONT)
    stall_to = time.time()
    loader.join(60)
    assert not loader.is_alive()

    started = [a for a in answers if a[1] == 200]
    refused = [a for a in answers if a[1] != 200]
    timeline = _timeline(answers, keys, stall_from, stall_to, stalled)
    assert all(a[1] == 503 for a in refused), timeline
    # Every start answered within the bound (and a loaded machine's slack).
    slowest = max(a[2] for a in answers)
    assert slowest < API_ANSWER_BOUND_SECONDS + 1.0, f"slowest {slowest:.2f} s\n{timeline}"
    # Refused: only the few drawn to the stalled partition before the API put it off.
    assert len(refused) <= 1 + STALL_SECONDS / 5 + 1, f"{len(refused)} refused\n{timeline}"
    # Answered while the master was stopped (one sent then may be answered once it is back).
    during = [a for a in started if stall_from + 1 < a[0] and a[0] + a[2] < stall_to - 0.1]
    assert during, f"no start answered 200 during the stall\n{timeline}"
    assert not any(keys.partition_of(a[3]).index in stalled for a in during), timeline

    # Once back: every execution final, each once; the healthy partitions' ran meanwhile.
    with httpx.Client(base_url=deployment.api.url, timeout=10) as http:
        deadline = time.monotonic() + 40
        snapshots: dict[str, dict[str, Any]] = {}
        for _, _, _, execution_id, _ in started:
            while True:
                snap = http.get(
                    "/api/v1/executions/wait", params={"id": execution_id, "timeout_ms": 5000}
                )
                if snap.status_code == 200 and snap.json()["state"] in (
                    "succeeded",
                    "failed",
                    "cancelled",
                ):
                    snapshots[execution_id] = snap.json()
                    break
                assert time.monotonic() < deadline, f"{execution_id} not final: {snap.text}"
    assert len(snapshots) == len({a[3] for a in started}) == len(started)
    assert all(s["state"] == "succeeded" for s in snapshots.values()), {
        i: s["state"] for i, s in snapshots.items() if s["state"] != "succeeded"
    }
    ran_during = [
        s for s in snapshots.values()
        if "started_at" in s and stall_from + 1 < _at(s["started_at"]) < stall_to
    ]  # fmt: skip
    assert ran_during, "no execution started anywhere while the master was stalled" + "\n".join(
        w.output()[-3000:] for w in deployment.workers
    )
    print(
        f"stalled master: {len(answers)} starts, {len(refused)} answered 503, slowest answer "
        f"{max(a[2] for a in answers):.2f} s; {len(during)} starts during the stall, "
        f"{len(ran_during)} executions started running during it "
        f"({len(ran_during) / (stall_to - stall_from - 1):.1f}/s against {RATE}/s offered)"
    )
