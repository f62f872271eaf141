"""Redis going away under load: cut from every process for a while, stopped and restarted
with its data, restarted empty, and a cancel racing the cut. No worker or API process
exits; once Redis is back every execution ends final with every report it made, a cancel
is never left `cancelling`, and new work is picked up at once."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import (
    LEASE_SECONDS,
    SWEEP_MARGIN,
    Scenario,
    http_client,
    note,
)
from tests.faults.workload import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.process]

STEPS, INTERVAL = 8, 0.5
"""The load: each execution reports for STEPS * INTERVAL seconds."""
RUN_SECONDS = STEPS * INTERVAL
SETTLE_SECONDS = RUN_SECONDS + LEASE_SECONDS + SWEEP_MARGIN + 3
"""How long the load may take to end once Redis is back: its run, a lease, and a margin."""


def settled(scenario: Scenario) -> str:
    return "NOT all final after" if scenario.unsettled else "all final"


async def pickup_after(scenario: Scenario, since: float, what: str, timeout: float = 8) -> float:
    """Start a probe now and answer how long after `since` a worker took it."""
    probe = await start_soon(scenario)
    await scenario.wait_states(
        [probe], {"running", "succeeded"}, timeout, f"{what}: a new execution picked up"
    )
    took = time.monotonic() - since
    await scenario.wait_final([probe], 10, f"{what}: the probe final")
    return took


async def start_soon(scenario: Scenario, timeout: float = 10) -> str:
    """Start one short execution, retrying while the direct client reconnects."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return (await scenario.start(1, REPORT, steps=1, interval=0.05))[0]
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def load(scenario: Scenario, count: int, **inp: float) -> list[str]:
    ids = await scenario.start(count, REPORT, **{"steps": STEPS, "interval": INTERVAL, **inp})
    await scenario.wait_states(ids, {"running"}, 20, f"{count} executions running")
    return ids


@pytest.mark.parametrize(
    ("cut_seconds", "partitions"),
    [(0.5, 1), (3.0, 3), (14.0, 1)],
    ids=["0.5s", "3s-3-partitions", "14s"],
)
async def test_a_redis_cut_under_load_loses_nothing_and_no_process_exits(
    scenario: Scenario, cut_seconds: float, partitions: int
) -> None:
    # On three partitions too: takes, beats, the sweep and the live feed each go to every
    # partition, and a take's answer lost in the cut is sent again to its own partition.
    scenario.partitioned(partitions)
    scenario.worker(max_jobs=100)
    scenario.worker(max_jobs=100)
    scenario.api()
    await scenario.ready()
    ids = await load(scenario, 50)
    await asyncio.sleep(1)  # the load runs a while before the fault
    cancelled = ids[0]

    scenario.outage(scenario.children)
    cut_at = time.monotonic()
    await asyncio.sleep(min(0.2, cut_seconds / 2))
    answer = await scenario.engine.cancel(cancelled)  # Redis is there; the workers are not
    assert answer.outcome == "requested", answer
    while time.monotonic() - cut_at < cut_seconds:
        scenario.assert_alive(during=f"a {cut_seconds}s Redis cut")
        await asyncio.sleep(0.1)
    scenario.assert_alive(during=f"a {cut_seconds}s Redis cut")
    scenario.restore()
    restored = time.monotonic()

    pickup = await pickup_after(scenario, restored, f"after a {cut_seconds}s cut")
    await scenario.wait_final(
        ids,
        SETTLE_SECONDS,
        f"after a {cut_seconds}s cut",
        strict=False,
    )
    scenario.assert_alive(during=f"the recovery from a {cut_seconds}s cut")
    note(
        f"cut {cut_seconds}s of 50 in flight: restore -> first new execution picked up "
        f"{pickup:.2f}s; restore -> {settled(scenario)} {time.monotonic() - restored:.2f}s"
    )
    # A silence longer than the lease may be taken for a lost worker: those may fail, with
    # `unavailable` and nothing else; a shorter one must not fail anything.
    longer_than_lease = cut_seconds >= LEASE_SECONDS
    verdict = await scenario.check(
        ids, failure_codes={"unavailable"} if longer_than_lease else set()
    )
    ending = verdict.snapshots[cancelled].state
    allowed = {"cancelled", "succeeded"} | ({"failed"} if longer_than_lease else set())
    assert ending in allowed, f"the execution cancelled during the cut ended {ending}"
    others = {verdict.snapshots[i].state for i in ids[1:]}
    if not longer_than_lease:
        assert others == {"succeeded"}, f"a {cut_seconds}s cut ended executions as {others}"


async def test_redis_restarted_with_its_data_loses_nothing(scenario: Scenario) -> None:
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    scenario.api()
    await scenario.ready()
    ids = await load(scenario, 30)
    await asyncio.sleep(1)  # the load runs a while before the fault

    scenario.redis.stop()  # SIGKILL; the append-only file has every acknowledged write
    await asyncio.sleep(1.5)  # Redis stays stopped this long
    scenario.assert_alive(during="Redis stopped")
    scenario.redis.start()
    restarted = time.monotonic()

    pickup = await pickup_after(scenario, restarted, "Redis restarted with its data")
    await scenario.wait_final(ids, SETTLE_SECONDS, "after the restart", strict=False)
    scenario.assert_alive(during="the recovery from a Redis restart")
    note(
        f"Redis killed 1.5s and restarted with its data, 30 in flight: restart -> first new "
        f"execution picked up {pickup:.2f}s; restart -> {settled(scenario)} "
        f"{time.monotonic() - restarted:.2f}s"
    )
    verdict = await scenario.check(ids)
    assert set(verdict.states) == {"succeeded"}, verdict.states


async def test_redis_restarted_empty_forgets_and_new_work_runs_at_once(
    scenario: Scenario, tmp_path: Path
) -> None:
    markers = tmp_path / "running"
    markers.mkdir()
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    api = scenario.api()
    await scenario.ready()
    forgotten = await load(scenario, 10, steps=60, interval=0.5, marker_dir=str(markers))
    await until_markers(markers, 10, timeout=5)

    scenario.redis.stop()
    scenario.redis.start(empty=True)
    restarted = time.monotonic()

    async with http_client(api.url) as http:
        # Over HTTP, once the API is back on the (empty) Redis, the forgotten are 404.
        codes = await until_not_503(
            http, [f"/api/v1/executions/get?id={i}" for i in forgotten], timeout=10
        )
        assert codes == {404}, f"forgotten executions answered {codes}"
        # New work is taken at once, over HTTP and to its end.
        started = await until_started(http, timeout=10)
        probe = started["id"]
        await scenario.wait_states(
            [probe], {"running", "succeeded"}, 10, "a new execution picked up"
        )
        pickup = time.monotonic() - restarted
        waited = (
            await http.get("/api/v1/executions/wait", params={"id": probe, "timeout_ms": 10_000})
        ).json()
        assert waited["state"] == "succeeded", (
            f"the first execution after the restart ended {waited['state']}: {waited.get('error')}"
        )

    # Their workers stop the handlers of executions Redis forgot.
    deadline = restarted + LEASE_SECONDS + SWEEP_MARGIN
    while (left := sorted(p.name for p in markers.iterdir())) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    stopped_in = time.monotonic() - restarted
    scenario.assert_alive(during="Redis restarted empty")
    # The loss is said, not hidden: every process logs it once, and /ready carries it.
    async with http_client(api.url) as http:
        while "redis_data_lost_at" not in (ready := (await http.get("/api/v1/ready")).json()):
            assert time.monotonic() < deadline, f"/ready never said the loss: {ready}"
            await asyncio.sleep(0.1)
    for child in scenario.children:
        while (said := child.output(10_000).count("lost its data")) == 0:
            assert time.monotonic() < deadline, f"{child.name} never said the loss"
            await asyncio.sleep(0.1)
        assert said == 1, f"{child.name} said the loss {said} times"
    note(
        f"Redis restarted empty, 10 in flight: restart -> new execution picked up "
        f"{pickup:.2f}s; handlers of the forgotten stopped after {stopped_in:.2f}s "
        f"({len(left)} still running)"
    )
    assert not left, (
        f"{len(left)} handlers of executions Redis forgot still run "
        f"{LEASE_SECONDS + SWEEP_MARGIN}s after the restart: {left[:3]}"
    )
    await scenario.check([probe])


async def until_markers(markers: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (found := len(list(markers.iterdir()))) < count:
        assert time.monotonic() < deadline, f"{found} of {count} handlers began within {timeout}s"
        await asyncio.sleep(0.05)


async def until_not_503(http: httpx.AsyncClient, paths: list[str], timeout: float) -> set[object]:
    """The statuses the paths answer once the API stops answering 503 (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        codes: set[object] = set()
        for path in paths:
            try:
                codes.add((await http.get(path)).status_code)
            except httpx.HTTPError as exc:
                codes.add(type(exc).__name__)
        if 503 not in codes or time.monotonic() > deadline:
            return codes
        await asyncio.sleep(0.1)


async def until_started(http: httpx.AsyncClient, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    body = {"capability": REPORT, "input": {"steps": 2, "interval": 0.1}}
    while True:
        response = await http.post("/api/v1/executions/start", json=body)
        if response.status_code == 200:
            return dict(response.json())
        assert time.monotonic() < deadline, (
            f"start kept answering {response.status_code}: {response.text}"
        )
        await asyncio.sleep(0.1)


async def test_a_cancel_racing_the_cut_is_never_left_cancelling(scenario: Scenario) -> None:
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    api = scenario.api()
    await scenario.ready()
    ids = await load(scenario, 16)
    await asyncio.sleep(0.5)  # the load runs a while before the fault
    rng = random.Random(11)
    offsets = [rng.uniform(-0.3, 0.3) for _ in ids]
    answers: dict[str, object] = {}
    cut_seconds = 1.5

    async with http_client(api.url, timeout=httpx.Timeout(5)) as http:

        async def cancel_at(execution_id: str, offset: float, origin: float) -> None:
            await asyncio.sleep(max(0.0, origin + offset - time.monotonic()))
            try:
                response = await http.post("/api/v1/executions/cancel", json={"id": execution_id})
                answers[execution_id] = (
                    response.json().get("outcome")
                    if response.status_code == 200
                    else response.status_code
                )
            except httpx.HTTPError as exc:
                answers[execution_id] = type(exc).__name__

        origin = time.monotonic() + 0.4
        cancels = [
            asyncio.create_task(cancel_at(i, o, origin)) for i, o in zip(ids, offsets, strict=True)
        ]
        await asyncio.sleep(max(0.0, origin - time.monotonic()))
        scenario.outage(scenario.children)
        await asyncio.sleep(cut_seconds)
        scenario.assert_alive(during="the cut")
        scenario.restore()
        restored = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*cancels), 15)

    await scenario.wait_final(ids, SETTLE_SECONDS, "after the cut", strict=False)
    scenario.assert_alive(during="the recovery")
    note(
        f"cancels racing a {cut_seconds}s cut: answers {dict(Counter(map(str, answers.values())))}; "
        f"restore -> {settled(scenario)} {time.monotonic() - restored:.2f}s"
    )
    verdict = await scenario.check(ids)
    requested = [i for i in ids if answers[i] == "requested"]
    wrong = {
        i: verdict.snapshots[i].state
        for i in requested
        if verdict.snapshots[i].state not in ("cancelled", "succeeded")
    }
    assert not wrong, f"acknowledged cancels that ended otherwise: {wrong}"
