"""Work over time: how late a delayed start starts, what 1,000 waiting ones cost Redis, and
what priorities cost a pick-up.

Lateness: `bench.noop` executions started with a due time 200-700 ms ahead (a random one
each, so they come due one by one) into one idle worker; lateness is its `started_ms`
less its due time, both on the machine's clock (the worker's take reads the server's
`TIME`), p50 and p99.

Idle cost: 1,000 executions due in an hour wait beside one idle worker; the figure is the
commands per second the server processes meanwhile (`INFO stats`, on a redis-server of the
run's own, so nothing else is counted), beside the same worker with nothing waiting.

Priorities: pick-up (just before the start to its `execution.started`, read with a blocking
`XREAD`) of one execution at a time into an idle worker, all at `normal` ("off") versus a
random level each ("on"), p50 and p99, in the same run.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from bench.harness import (
    Bench,
    Row,
    children,
    majordomus_worker,
    ms,
    percentile,
    wait_for_workers,
)
from majordomus.engine import Engine
from majordomus.local.embedded import EmbeddedRedis
from majordomus.start_options import StartOptions

LATENESS_GOAL_MS = 5.0
IDLE_GOAL = 1.0
"""Commands per second that 1,000 waiting executions add to an idle worker's own (its
beat, its fallback poll): about zero."""


async def run(bench: Bench) -> list[Row]:
    n_delayed = bench.size(200, 20)
    n_pickup = bench.size(300, 20)
    idle_seconds = 1.0 if bench.quick else 10.0
    rng = random.Random(11)
    with EmbeddedRedis() as server:
        own = Bench(server.url, bench.quick, bench.workdir, bench.prefix)
        with children() as kids:
            worker = majordomus_worker(own)
            kids.append(worker)
            await wait_for_workers(own, 1)
            async with own.engine() as engine:
                lateness = await _lateness(engine, n_delayed, rng)
                quiet = await _commands_per_second(engine, idle_seconds)
                due = int(time.time() * 1000) + 3_600_000
                for _ in range(1000):
                    await engine.start("bench.noop", {}, options=StartOptions(start_at_ms=due))
                await asyncio.sleep(0.5)
                waiting = await _commands_per_second(engine, idle_seconds)
                off = await _pickups(engine, n_pickup, rng, mixed=False)
                on = await _pickups(engine, n_pickup, rng, mixed=True)
    bench.note(
        f"over time: {n_delayed} delayed starts due 200-700 ms ahead, one idle worker; "
        f"idle cost over {idle_seconds:g} s on a redis-server of the run's own: "
        f"{quiet:.1f} commands/s with nothing waiting, {waiting:.1f} with 1,000 due in an hour."
    )
    p50, p99 = percentile(lateness, 50), percentile(lateness, 99)
    return [
        Row("over_time", "delayed start lateness, p50", p50, "ms",
            goal=f"< {LATENESS_GOAL_MS:g} ms", met=p50 < LATENESS_GOAL_MS, higher_is_better=False),
        Row("over_time", "delayed start lateness, p99", p99, "ms", higher_is_better=False),
        Row("over_time", "Redis commands/s, 1,000 delayed waiting", waiting, "/s",
            baseline=quiet, baseline_name="the same worker, nothing waiting",
            goal=f"< {IDLE_GOAL:g} /s more", met=waiting - quiet < IDLE_GOAL,
            higher_is_better=False),
        Row("over_time", "pickup with priorities, p50", percentile(on, 50), "ms",
            baseline=percentile(off, 50), baseline_name="every start at normal",
            higher_is_better=False),
        Row("over_time", "pickup with priorities, p99", percentile(on, 99), "ms",
            baseline=percentile(off, 99), baseline_name="every start at normal",
            higher_is_better=False),
    ]


async def _lateness(engine: Engine, n: int, rng: random.Random) -> list[float]:
    plan: list[tuple[str, int]] = []
    for _ in range(n):
        due = int(time.time() * 1000) + rng.randint(200, 700)
        snap = await engine.start("bench.noop", {}, options=StartOptions(start_at_ms=due))
        plan.append((snap.id, due))
    deadline = time.monotonic() + 60
    while True:
        fields = await engine.store.snapshot_fields([i for i, _ in plan], ["started_ms"])
        if all(f[0] for f in fields) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return [float(int(f[0]) - due) for (_, due), f in zip(plan, fields, strict=True) if f[0]]


async def _commands_per_second(engine: Engine, seconds: float) -> float:
    async def processed() -> int:
        info: dict[str, Any] = await engine.redis.info("stats")
        return int(info["total_commands_processed"])

    before = await processed()
    await asyncio.sleep(seconds)
    # The two INFO calls themselves are not the worker's.
    return (await processed() - before - 1) / seconds


async def _pickups(engine: Engine, n: int, rng: random.Random, *, mixed: bool) -> list[float]:
    out: list[float] = []
    levels = ("low", "normal", "high")
    for i in range(n + 3):
        await asyncio.sleep(rng.uniform(0.02, 0.05))
        options = StartOptions(priority=rng.choice(levels) if mixed else "normal")  # type: ignore[arg-type]
        t0 = time.perf_counter()
        snap = await engine.start("bench.noop", {}, options=options)
        while not await engine.store.read_stream_after(snap.id, 2, 5000):
            if time.perf_counter() - t0 > 30:
                raise RuntimeError(f"{snap.id} was not started")
        if i >= 3:  # the first ones warm up
            out.append(ms(time.perf_counter() - t0))
    return out
