"""A worker killed with many executions on it: what it ran ends `failed` (`unavailable`)
within the lease plus 2 s, and nothing it held runs a second time, elsewhere or later. With
no worker left at all, the API processes sweep."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from tests.faults.conftest import (
    LEASE_SECONDS,
    SWEEP_MARGIN,
    Scenario,
    note,
    spread,
    stamp_seconds,
)

pytestmark = [pytest.mark.slow, pytest.mark.process]

SLEEPY = "tests.sleepy"
SERIAL = "tests.serial"
PER_TENANT = "tests.per_tenant_capped"
BOUND = LEASE_SECONDS + SWEEP_MARGIN


async def held_by(scenario: Scenario, ids: list[str]) -> dict[str, str]:
    """The worker each execution runs on."""
    snaps = [await scenario.engine.get(i) for i in ids]
    return {s.id: str(s.worker) for s in snaps}


async def assert_lost_in_time(
    scenario: Scenario, lost: list[str], killed_at: float, what: str
) -> list[float]:
    """Every one of `lost` failed `unavailable` within the bound; answers each time to final."""
    await scenario.wait_final(lost, BOUND + 3, f"{what}: the dead worker's executions final")
    late, wrong, times = [], [], []
    for execution_id in lost:
        snap = await scenario.engine.get(execution_id)
        code = getattr(snap.error, "code", None)
        if snap.state != "failed" or code != "unavailable":
            wrong.append((execution_id, snap.state, code))
            continue
        took = stamp_seconds(str(snap.finished_at)) - killed_at
        times.append(took)
        if took > BOUND:
            late.append((execution_id, round(took, 2)))
    note(f"{what}: time from SIGKILL to final: {spread(times)}")
    assert not wrong, f"{what}: ended otherwise than failed/unavailable: {wrong[:5]}"
    assert not late, f"{what}: {len(late)} final later than {BOUND}s after the kill: {late[:5]}"
    return times


async def test_a_killed_workers_executions_fail_unavailable_in_time_and_never_rerun(
    scenario: Scenario,
) -> None:
    # On three partitions: the sweeper finds the dead worker's executions in every one.
    scenario.partitioned(3)
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    await scenario.ready()
    everything: list[str] = []
    lost_ever: dict[str, str] = {}
    all_times: list[float] = []
    for round_no in range(1, 3):
        what = f"round {round_no}"
        ids = await scenario.start(100, SLEEPY, seconds=60)
        everything += ids
        await scenario.wait_states(ids, {"running"}, 20, f"{what}: 100 executions running")
        owners = await held_by(scenario, ids)
        by_worker = Counter(owners.values())
        victim_id, _ = by_worker.most_common(1)[0]
        pids = {wid: pid for pid, wid in (await scenario.worker_ids()).items()}
        victim = next(c for c in scenario.workers if c.pid == pids[victim_id])
        lost = [i for i, w in owners.items() if w == victim_id]
        survivors = [i for i in ids if i not in lost]
        note(f"{what}: running per worker {dict(by_worker)}; killing {victim.name}")

        killed_at = time.time()
        victim.kill()
        scenario.worker(max_jobs=50)  # an idle worker at hand, should anything be requeued
        all_times += await assert_lost_in_time(scenario, lost, killed_at, what)
        lost_ever.update(dict.fromkeys(lost, victim_id))

        states = await scenario.states(survivors)
        assert set(states.values()) == {"running"}, (
            f"{what}: the surviving worker's executions were disturbed: {Counter(states.values())}"
        )
        await asyncio.gather(*(scenario.engine.cancel(i) for i in survivors))
        await scenario.wait_final(survivors, 10, f"{what}: the survivors cancelled")
        await scenario.ready()
        scenario.assert_alive(during=what)

    # Long enough for a requeued job to have been picked up by the idle workers.
    await asyncio.sleep(1)  # time passes: a requeued job would have run by now
    verdict = await scenario.check(everything, failure_codes={"unavailable"})
    moved = [i for i, wid in lost_ever.items() if str(verdict.snapshots[i].worker) != wid]
    assert not moved, f"executions of a dead worker ran elsewhere: {moved[:5]}"
    note(f"all rounds: time from SIGKILL to final: {spread(all_times)}")


async def test_with_every_worker_killed_the_api_sweeps_their_executions_in_time(
    scenario: Scenario,
) -> None:
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    scenario.api()
    await scenario.ready()
    ids = await scenario.start(40, SLEEPY, seconds=60)
    await scenario.wait_states(ids, {"running"}, 20, "40 executions running")

    killed_at = time.time()
    for worker in scenario.workers:
        worker.kill()
    await assert_lost_in_time(scenario, ids, killed_at, "no worker left")
    scenario.assert_alive(during="after the workers were killed")
    await scenario.check(ids, failure_codes={"unavailable"})


async def test_a_killed_slot_holder_frees_its_slot_and_the_waiting_run_in_order(
    scenario: Scenario,
) -> None:
    """`max_concurrency=1`: the holder's worker is killed with five executions waiting for
    the slot. The holder fails `unavailable` in time, its slot is freed by that very
    failure, and the five run one after another, oldest first, each once."""
    scenario.worker(max_jobs=10)
    scenario.worker(max_jobs=10)
    await scenario.ready()
    [holder] = await scenario.start(1, SERIAL, seconds=60)
    await scenario.wait_states([holder], {"running"}, 20, "the slot holder running")
    waiting: list[str] = []
    for _ in range(5):  # one at a time: their creation order is the order they must run in
        waiting += await scenario.start(1, SERIAL, seconds=0.2)
    await asyncio.sleep(0.5)  # time passes: they stay queued behind the slot
    assert set((await scenario.states(waiting)).values()) == {"queued"}
    owner = str((await scenario.engine.get(holder)).worker)
    pids = {wid: pid for pid, wid in (await scenario.worker_ids()).items()}
    victim = next(c for c in scenario.workers if c.pid == pids[owner])

    killed_at = time.time()
    victim.kill()
    await assert_lost_in_time(scenario, [holder], killed_at, "slot holder killed")
    await scenario.wait_final(waiting, 20, "the executions waiting for the slot")
    verdict = await scenario.check([holder, *waiting], failure_codes={"unavailable"})
    snaps = [verdict.snapshots[i] for i in waiting]
    assert {s.state for s in snaps} == {"succeeded"}
    started = [stamp_seconds(str(s.started_at)) for s in snaps]
    finished = [stamp_seconds(str(s.finished_at)) for s in snaps]
    assert started == sorted(started), "the oldest waiting execution did not run first"
    assert all(b >= a for a, b in zip(finished, started[1:], strict=False)), (
        "two ran at once under max_concurrency=1"
    )
    freed = stamp_seconds(str(verdict.snapshots[holder].finished_at))
    note(
        f"slot holder killed, 5 waiting: holder final {freed - killed_at:.2f}s after the kill; "
        f"first waiting one started {started[0] - freed:.3f}s after the slot was freed"
    )


async def test_a_killed_key_slot_holder_frees_its_key_and_the_keys_waiting_run_in_order(
    scenario: Scenario,
) -> None:
    """A limit of one per key and three in all (`per_key`, `max_concurrency`): the worker of
    tenant a's running execution is killed with four of a's waiting in their key's list. The
    holder fails `unavailable` in time, that failure frees its key's slot and its capability's,
    and a's four run one after another, oldest first, each once; tenant b ran meanwhile."""
    scenario.worker(max_jobs=10)
    scenario.worker(max_jobs=10)
    await scenario.ready()
    [holder] = await scenario.start(1, PER_TENANT, tenant="a", seconds=60)
    await scenario.wait_states([holder], {"running"}, 20, "tenant a's holder running")
    waiting: list[str] = []
    for _ in range(4):  # one at a time: their creation order is the order they must run in
        waiting += await scenario.start(1, PER_TENANT, tenant="a", seconds=0.2)
    others = await scenario.start(2, PER_TENANT, tenant="b", seconds=0.1)
    await scenario.wait_final(others, 20, "tenant b's, beside a's holder")
    assert set((await scenario.states(waiting)).values()) == {"queued"}
    owner = str((await scenario.engine.get(holder)).worker)
    pids = {wid: pid for pid, wid in (await scenario.worker_ids()).items()}
    victim = next(c for c in scenario.workers if c.pid == pids[owner])

    killed_at = time.time()
    victim.kill()
    await assert_lost_in_time(scenario, [holder], killed_at, "key slot holder killed")
    await scenario.wait_final(waiting, 20, "tenant a's executions waiting for its slot")
    verdict = await scenario.check([holder, *waiting, *others], failure_codes={"unavailable"})
    snaps = [verdict.snapshots[i] for i in waiting]
    assert {s.state for s in snaps} == {"succeeded"}
    started = [stamp_seconds(str(s.started_at)) for s in snaps]
    finished = [stamp_seconds(str(s.finished_at)) for s in snaps]
    assert started == sorted(started), "the key's oldest waiting execution did not run first"
    # One of a key at once (the workers' stamps: a few ms of slack, `STAMP_SLACK_MS`).
    assert all(b >= a - 0.01 for a, b in zip(finished, started[1:], strict=False)), (
        "two of one key ran at once under per_key 1"
    )
    freed = stamp_seconds(str(verdict.snapshots[holder].finished_at))
    note(
        f"key slot holder killed, 4 of its key waiting: holder final {freed - killed_at:.2f}s "
        f"after the kill; the key's first waiting one started {started[0] - freed:.3f}s after"
    )


async def test_a_worker_killed_while_taking_a_burst_strands_nothing(scenario: Scenario) -> None:
    """A worker killed in the middle of a burst of 300 short starts: what it took it had
    started (a take is a claim, `take.lua`), so those fail `unavailable` and the rest run
    elsewhere once; nothing stays queued or running, and none was started twice."""
    victim = scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    scenario.api()
    await scenario.ready()
    ids = await scenario.start(300, SLEEPY, seconds=0.05)
    await asyncio.sleep(0.03)  # the kill lands mid-burst
    victim.kill()
    await scenario.wait_final(ids, BOUND + 10, "the burst, after its taker was killed")
    verdict = await scenario.check(ids, failure_codes={"unavailable"})
    attempts = {verdict.snapshots[i].attempt for i in ids}
    note(f"worker killed mid-burst of 300: {dict(verdict.states)}; attempts {sorted(attempts)}")
    assert attempts == {1}, "an execution was started twice"
    assert set(verdict.states) <= {"succeeded", "failed"}
