"""A worker SIGKILLed mid-attempt, under a policy that retries `unavailable`: the sweeper
fails the lost attempt and starts exactly one next attempt, which runs on another worker;
the lost one never runs again."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from majordomus.model import event_type_of
from majordomus.retries import RETRY_SCHEDULED
from majordomus.start_options import StartOptions
from majordomus.sweeper import LOST_RETRY_FLOOR_MS
from tests.api.conftest import WorkerChild
from tests.conftest import _redis_url
from tests.retries.conftest import (
    LEASE_SECONDS,
    LOSS_PREFIX,
    attempts_in,
    chain_of,
    child_env,
    engine_on,
    forget_prefix,
    wait_for_workers,
)
from tests.retries.workload import FRAGILE

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture
def pair() -> Iterator[list[WorkerChild]]:
    """Two workers on a prefix of their own, so killing one disturbs no other test."""
    url = _redis_url()
    forget_prefix(url, LOSS_PREFIX)
    workers = [WorkerChild(url, **child_env(LOSS_PREFIX)) for _ in range(2)]
    try:
        wait_for_workers(url, LOSS_PREFIX, workers)
        yield workers
    finally:
        for w in workers:
            w.stop()


async def test_a_worker_killed_mid_attempt_is_retried_once_after_the_sweeper(
    pair: list[WorkerChild], marker: Path
) -> None:
    async with engine_on(LOSS_PREFIX) as engine:
        # With a bound of its own, which its retry keeps (the sweeper starts this one).
        first = await engine.start(
            FRAGILE, {"marker": str(marker)}, options=StartOptions(timeout_ms=60_000)
        )
        deadline = time.monotonic() + 15
        while not attempts_in(marker):
            assert time.monotonic() < deadline, "the first attempt did not start"
            await asyncio.sleep(0.02)
        pid = int(attempts_in(marker)[0][0])
        victim = next(w for w in pair if w.process.pid == pid)
        survivor = next(w for w in pair if w is not victim)
        killed_at = time.monotonic()
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)

        chain = await chain_of(engine, first.id, timeout_ms=20_000)
        assert [s.state for s in chain] == ["failed", "succeeded"], survivor.output()[-2000:]
        lost, retry = chain
        assert lost.error.code == "unavailable"  # type: ignore[union-attr]
        assert [d.code for d in lost.diagnostics] == [RETRY_SCHEDULED]
        assert f"attempt 2 of 3 in {LOST_RETRY_FLOOR_MS} ms" in lost.diagnostics[0].summary
        assert (lost.retried_as, retry.retry_of, retry.attempt) == (retry.id, lost.id, 2)
        assert retry.output == {"attempts": 2}
        kept = await engine.redis.hget(engine.store.keys.snapshot(retry.id), "timeout_ms")
        assert kept == b"60000"
        print(
            f"retried and done {time.monotonic() - killed_at:.1f} s after the kill (lease "
            f"{LEASE_SECONDS} s, a lost attempt's retry floor {LOST_RETRY_FLOOR_MS} ms)"
        )

        await asyncio.sleep(1)  # time for a second retry or a rerun, were there one
        lines = attempts_in(marker)
        assert len(lines) == 2 and int(lines[1][0]) == survivor.process.pid
        everything = await engine.list(capability=FRAGILE)
        assert sorted(s.id for s in everything.executions) == sorted([lost.id, retry.id])
        events = [event_type_of(e) for e in (await engine.events(lost.id)).events]
        assert events.count("execution.started") == 1 and events[-1] == "execution.failed"
