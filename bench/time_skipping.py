"""The testing kit's skipped time, in wall seconds: what a test of an hour costs.

    python -m bench.time_skipping            # 5 runs of each scenario, medians
    python -m bench.time_skipping --runs 20

Each scenario runs in a fresh `majordomus.testing.Environment` (in-process fakeredis, one
worker) and checks its outcome; the figures are the wall time of the skip alone (the
clock's stops, the ticks, takes, runs and sweeps in it) and of the whole test (the
environment opened and closed too), median and worst of the runs:

- an hour's delay: a start delayed by an hour, then a skip of an hour;
- a retry chain: an attempt that fails `unavailable` twice, retried after 10 minutes each
  time, then a skip of an hour (both retries run in it);
- a day of an hourly schedule: a skip of 24 hours, 24 ticks, 24 executions;
- a month of a daily schedule: a skip of 30 days, 30 executions;
- a lease running out: a worker killed while it runs an execution, then a skip of the
  lease (15 s): the sweeper fails it `unavailable`.

Nothing here is asserted as a goal: the figures are for the notes (the tests of the kit
assert behaviour only).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import msgspec

from majordomus import Context, MajordomusError, Retry, Schedule, capability
from majordomus.registry import Registry
from majordomus.testing import Environment

TEN_MINUTES_MS = 600_000


TICKS: list[str] = []
"""The executions `bench.tick` ran (the store keeps finished ones a week only)."""


def _registry(schedule: str | None = None) -> Registry:
    """The scenarios' capabilities, with `schedule` on `bench.tick` (None: none)."""
    reg = Registry()

    class Empty(msgspec.Struct):
        pass

    class Done(msgspec.Struct):
        attempt: int = 0

    @capability("bench.noop", input=Empty, output=Done, registry=reg)
    async def noop(ctx: Context, inp: Empty) -> Done:
        return Done()

    @capability(
        "bench.flaky",
        input=Empty,
        output=Done,
        registry=reg,
        retry=Retry(
            attempts=3,
            backoff_ms=TEN_MINUTES_MS,
            factor=1.0,
            max_backoff_ms=TEN_MINUTES_MS,
            jitter=0.0,
            retry_codes=("unavailable",),
        ),
    )
    async def flaky(ctx: Context, inp: Empty) -> Done:
        assert ctx.engine is not None and ctx.execution_id is not None
        attempt = (await ctx.engine.get(ctx.execution_id)).attempt
        if attempt < 3:
            raise MajordomusError("unavailable", "not yet", "wait")
        return Done(attempt)

    @capability("bench.linger", input=Empty, output=Done, registry=reg, cancellable=True)
    async def linger(ctx: Context, inp: Empty) -> Done:
        await ctx.sleep(3600)
        return Done()

    if schedule is not None:

        @capability(
            "bench.tick", input=Empty, output=Done, registry=reg, schedules=[Schedule(schedule)]
        )
        async def tick(ctx: Context, inp: Empty) -> Done:
            TICKS.append(str(ctx.execution_id))
            return Done()

    return reg


Scenario = Callable[[Environment], Awaitable[float]]
"""Runs in an open environment; answers the wall seconds of its skip."""


async def _timed(skip: Awaitable[None]) -> float:
    began = time.perf_counter()
    await skip
    return time.perf_counter() - began


async def an_hours_delay(env: Environment) -> float:
    execution = await env.client.start("bench.noop", {}, delay=timedelta(hours=1))
    seconds = await _timed(env.skip(hours=1))
    assert (await execution.refresh()).state == "succeeded"
    return seconds


async def a_retry_chain(env: Environment) -> float:
    first = await env.client.start("bench.flaky", {})
    await first.wait(timeout=10)
    seconds = await _timed(env.skip(hours=1))
    assert await first.result(timeout=10) == {"attempt": 3}
    return seconds


def a_schedule(days: int, executions: int) -> Scenario:
    async def scenario(env: Environment) -> float:
        TICKS.clear()
        seconds = await _timed(env.skip(days=days))
        assert len(TICKS) == executions, len(TICKS)
        return seconds

    return scenario


async def a_lease_running_out(env: Environment) -> float:
    execution = await env.client.start("bench.linger", {})
    while (await execution.refresh()).state != "running":
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.02)  # its worker has it in hand
    await env.kill_worker()
    assert env.settings is not None
    seconds = await _timed(env.skip(seconds=env.settings.lease_seconds))
    snap = await execution.refresh()
    assert snap.state == "failed" and snap.error and snap.error.code == "unavailable", snap
    return seconds


SCENARIOS: tuple[tuple[str, str, Scenario, str | None], ...] = (
    ("an hour's delay", "1 h", an_hours_delay, None),
    ("a retry chain (2 x 10 min)", "1 h", a_retry_chain, None),
    ("a day of an hourly schedule", "24 h", a_schedule(1, 24), "0 * * * *"),
    ("a month of a daily schedule", "30 d", a_schedule(30, 30), "0 7 * * *"),
    ("a lease running out", "15 s", a_lease_running_out, None),
)


async def _once(scenario: Scenario, schedule: str | None) -> tuple[float, float]:
    began = time.perf_counter()
    async with Environment(_registry(schedule)) as env:
        skip = await scenario(env)
    return skip, time.perf_counter() - began


async def main(runs: int) -> None:
    print(f"majordomus.testing, time skipping: median (worst) of {runs} runs, wall seconds")
    print(f"{'scenario':<30} {'skipped':>8} {'the skip':>16} {'the whole test':>16}")
    for name, skipped, scenario, schedule in SCENARIOS:
        skips, wholes = [], []
        for _ in range(runs):
            skip, whole = await _once(scenario, schedule)
            skips.append(skip)
            wholes.append(whole)
        print(
            f"{name:<30} {skipped:>8} "
            f"{statistics.median(skips):>8.3f} ({max(skips):.3f}) "
            f"{statistics.median(wholes):>8.3f} ({max(wholes):.3f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # The killed worker's and the sweeper's lines are the scenario, not news.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    asyncio.run(main(args.runs))
