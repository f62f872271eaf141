"""Work over time through a long Redis cut: delayed starts that come due while every
process is cut off run once Redis is back, and a schedule ticking every second through
the cut starts no tick twice, starts the ticks it missed as its policy says, and goes on
ticking: no process exits, nothing is started twice, everything ends."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from majordomus.start_options import StartOptions
from tests.faults.conftest import Scenario, note
from tests.faults.workload import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.process]

GRACE_SECONDS = 4
"""The processes' `schedule_grace` (10 s by default), shorter, so that a shorter cut is
past it."""
CUT_SECONDS = 7.0
"""Longer than a schedule's grace: some ticks are missed."""


async def test_delayed_starts_and_schedule_ticks_due_during_a_long_cut_run_after_it(
    scenario: Scenario,
) -> None:
    grace = {"MAJORDOMUS_SCHEDULE_GRACE": str(GRACE_SECONDS)}
    scenario.worker(max_jobs=20, **grace)  # runs the ticker too
    scenario.api(**grace)
    await scenario.ready()
    engine = scenario.engine
    created = await engine.call(
        "schedules.create",
        {
            "capability": REPORT,
            "cron": "* * * * * *",
            "execution_input": {"steps": 1, "interval": 0.01},
            "missed": "once",
            "name": "every-second",
        },
    )
    schedule_id = created.output.id
    due_at = int(time.time() * 1000) + 3000
    delayed = [
        (
            await engine.start(
                REPORT, {"steps": 1, "interval": 0.01}, options=StartOptions(start_at_ms=due_at)
            )
        ).id
        for _ in range(5)
    ]
    await asyncio.sleep(1.5)  # a tick or two before the cut

    scenario.outage(scenario.children)
    cut_at = time.monotonic()
    while time.monotonic() - cut_at < CUT_SECONDS:
        scenario.assert_alive(during=f"a {CUT_SECONDS}s Redis cut")
        await asyncio.sleep(0.2)
    scenario.restore()
    restored, restored_ms = time.monotonic(), int(time.time() * 1000)

    await scenario.wait_final(delayed, 20, "the delayed starts after the cut")
    took = time.monotonic() - restored

    async def ticked() -> list[tuple[str, str]]:
        listed = await engine.list(capability=REPORT, limit=200)
        return [
            (x.id, str(x.idempotency_key))
            for x in listed.executions
            if x.schedule == schedule_id
        ]

    before = len(await ticked())
    deadline = time.monotonic() + 10
    while len(await ticked()) < before + 3:  # it goes on ticking
        assert time.monotonic() < deadline, "the schedule stopped ticking after the cut"
        scenario.assert_alive(during="the recovery")
        await asyncio.sleep(0.2)
    await engine.call("schedules.delete", {"id": schedule_id})
    ticks = await ticked()
    await scenario.wait_final([i for i, _ in ticks], 20, "the ticks after the cut")
    scenario.assert_alive(during="the recovery from the cut")

    # No tick twice: each tick is started under its own key, once.
    keys = Counter(key for _, key in ticks)
    assert all(n == 1 for n in keys.values()), keys.most_common(3)
    # The ticks older than the grace when the ticker came back were missed, and started
    # once for all of them (`missed="once"`); those within it were started each as itself.
    tick_ms = sorted(int(key.rsplit(":", 1)[1]) for key in keys)
    grace_ms = GRACE_SECONDS * 1000
    cut_ms = restored_ms - int(CUT_SECONDS * 1000)
    missed = [t for t in tick_ms if cut_ms + 1000 < t < restored_ms - grace_ms - 1000]
    assert len(missed) <= 1, (missed, tick_ms)
    assert any(t >= restored_ms - grace_ms for t in tick_ms)
    elapsed = time.monotonic() - cut_at + 1.5
    verdict = await scenario.check(delayed + [i for i, _ in ticks])
    states = {verdict.snapshots[i].state for i in delayed + [i for i, _ in ticks]}
    assert states == {"succeeded"}, states
    note(
        f"{CUT_SECONDS:.0f}s cut with 5 delayed starts due in it and a schedule every second: "
        f"restore -> delayed all final {took:.2f}s; {len(ticks)} ticks started over "
        f"{elapsed:.0f}s, none twice"
    )
