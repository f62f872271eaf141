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
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    await scenario.ready()
    everything: list[str] = []
    lost_ever: dict[str, str] = {}
    all_times: list[float] = []
    for round_no in range(1, 4):
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
    await asyncio.sleep(1)
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
