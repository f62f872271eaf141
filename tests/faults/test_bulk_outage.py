"""A bulk cancel whose worker loses Redis mid-way (issue 36, point 3): the cancels done are
done, each whole; the action's attempt ends `unavailable` (or its worker's lease lapses)
and its retry policy starts it again, which passes by what was done and cancels the rest.
A real worker process behind a proxy that cuts its Redis; the test's engine is not cut.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from majordomus.matching import Match
from majordomus.start_options import StartOptions
from tests.faults.conftest import Scenario, note

pytestmark = pytest.mark.usefixtures("spawns")  # a Redis and a worker of its own

EXECUTIONS = 10_000
CUT_SECONDS = 3.0


async def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)
    return value


async def test_a_bulk_cancel_cut_from_redis_is_started_again_and_cancels_the_rest(
    scenario: Scenario,
) -> None:
    engine = scenario.engine
    worker = scenario.worker()
    await scenario.ready()
    later = StartOptions(start_at_ms=int(time.time() * 1000) + 3_600_000)
    ids: list[str] = []
    for begin in range(0, EXECUTIONS, 500):
        made = await asyncio.gather(
            *(engine.start("tests.noop", {}, options=later) for _ in range(begin, begin + 500))
        )
        ids += [m.id for m in made]
    bulk = await engine.start("executions.cancel_matching", {"capability": "tests.noop"})

    async def progressed() -> bool:
        snap = await engine.get(bulk.id)
        return bool(snap.progress and getattr(snap.progress, "current", 0) > 0)

    await _until(progressed, 60, "the bulk cancel's first page")
    scenario.outage([worker])
    left_at_cut = (await engine.count(Match(capability="tests.noop"))).cancellable
    await asyncio.sleep(CUT_SECONDS)
    scenario.assert_alive(during="a Redis cut")
    scenario.restore()

    async def chain_ended() -> Any:
        snap = await engine.get(bulk.id)
        while isinstance(snap.retried_as, str):
            snap = await engine.get(snap.retried_as)
        return snap if snap.state in ("succeeded", "failed", "cancelled") else None

    last = await _until(chain_ended, 120, "the bulk cancel's chain to end")
    assert last.state == "succeeded", last
    assert last.id != bulk.id and last.attempt >= 2, "the cut attempt was started again"
    first = await engine.get(bulk.id)
    assert first.state == "failed" and first.error.code == "unavailable", first
    # Every execution cancelled, each whole and once: created, queued, cancelled.
    rows = await engine.store.snapshot_fields(ids, ["state", "last_seq"])
    assert {tuple(row) for row in rows} == {(b"cancelled", b"3")}
    note(
        f"bulk cancel of {EXECUTIONS}: its worker cut from Redis {CUT_SECONDS:.0f} s after "
        f"its first page ({left_at_cut} left then); attempt {last.attempt} finished with "
        f"{last.output}"
    )
