"""Redis cost: the Redis CPU and the round trips one no-op execution costs, start to final.

On a redis-server of the run's own (so nothing else is counted), N `bench.noop`
executions are enqueued first, then one worker (`max_jobs` 10) drains them. Redis CPU is
the server's own `used_cpu_user + used_cpu_sys` (`INFO cpu`) over each phase, divided by
N: the enqueue (`create.lua`: the snapshot, both first events, the indexes, the queue
entry) and the drain (the take, `take.lua`, which starts a batch at once; the terminal
event; everything the worker does meanwhile). Three rounds, each followed by its baseline,
the median shown and every round noted: this machine's speed swings from one minute to the
next. Round trips are counted in a second, smaller pass with `MONITOR`, one execution at a
time (started, then waited for, so the take batches nothing: the worst case): every
command a client sent (the commands a script runs inside are shown as the script's and not
counted), by command, per execution, the worker's beats and sweeps over the pass included.

The baseline is plain redis-py doing the least an execution's record could be: one
pipelined `HSET` of a snapshot and one `XADD` per lifecycle event (four), no index, no
queue, no feed, no script, per execution, on the same server, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from bench.harness import Bench, Row, children, fan_out, majordomus_worker, wait_for_workers
from majordomus.local.embedded import EmbeddedRedis

CPU_GOAL_US = 150.0
MAX_JOBS = 10
ENQUEUERS = 16
ROUNDS = 3


async def run(bench: Bench) -> list[Row]:
    n = bench.size(10_000, 300)
    traced = bench.size(300, 50)
    rounds: list[tuple[float, float, float]] = []  # (start us, drain us, baseline us)
    with EmbeddedRedis() as server:
        own = Bench(server.url, bench.quick, bench.workdir, bench.prefix)
        for _ in range(bench.size(ROUNDS, 1)):
            create_us, drain_us = await cpu_per_execution(own, n)
            rounds.append((create_us, drain_us, await _baseline_cpu(own, n)))
        trips = await _round_trips(own, traced)
    create_us, drain_us, _ = sorted(rounds, key=lambda r: r[0] + r[1])[len(rounds) // 2]
    baseline_us = statistics.median(r[2] for r in rounds)
    # An idle worker's BLMOVE goes in one write with the take behind it: one trip, two
    # commands.
    per_exec = (sum(trips.values()) - trips["BLMOVE"]) / traced
    shown = ", ".join(f"{name} {count / traced:.2f}" for name, count in trips.most_common())
    bench.note(
        f"redis cost: commands per execution by name: {shown} (a BLMOVE and the take behind "
        "it are one round trip)."
    )
    bench.note(
        f"redis cost: Redis CPU per execution {create_us:.0f} us to start it and "
        f"{drain_us:.0f} us to take, run and end it in the median round ({n} enqueued "
        f"first, then drained by one worker of max_jobs {MAX_JOBS}, on a redis-server of "
        "the run's own); round by round (start + drain, bare baseline): "
        + ", ".join(f"{c:.0f} + {d:.0f} = {c + d:.1f} us ({b:.1f} us)" for c, d, b in rounds)
        + "."
    )
    return [
        Row(
            "redis_cost",
            "Redis CPU per no-op execution, start to final",
            create_us + drain_us,
            " us",
            baseline=baseline_us,
            baseline_name="a bare HSET + 4 XADD per execution, pipelined",
            goal=f"<= {CPU_GOAL_US:.0f} us",
            met=create_us + drain_us <= CPU_GOAL_US,
            higher_is_better=False,
        ),
        Row(
            "redis_cost",
            "round trips per no-op execution (all clients)",
            per_exec,
            "",
            goal="start + take batch + end",
            higher_is_better=False,
        ),
    ]


async def server_cpu(redis: Any) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def cpu_per_execution(
    bench: Bench,
    n: int,
    capability: str = "bench.noop",
    input_of: Callable[[int], dict[str, Any]] | None = None,
    timing: list[float] | None = None,
    **settings: str,
) -> tuple[float, float]:
    """(Redis CPU us per execution to start it, to take, run and end it), the engine and the
    worker on `settings` (names of `Settings`, values as the environment gives them): N
    executions of `capability` (`bench.noop`), the i-th with the input `input_of(i)` ({});
    the drain's seconds are appended to `timing` when one is given."""
    await bench.flush()
    redis = aioredis.from_url(bench.redis_url)
    env = {f"MAJORDOMUS_{name.upper()}": value for name, value in settings.items()}
    try:
        async with bench.engine(**settings) as engine:
            before = await server_cpu(redis)
            numbers = iter(range(n))
            await fan_out(
                n,
                lambda: engine.start(capability, input_of(next(numbers)) if input_of else {}),
                ENQUEUERS,
            )
            created = await server_cpu(redis) - before
            with children() as kids:
                kids.append(majordomus_worker(bench, MAX_JOBS, **env))
                await wait_for_workers(bench, 1)
                before, began = await server_cpu(redis), time.monotonic()
                while await engine.store.finished_count() < n:
                    if not kids[0].alive():
                        raise RuntimeError(f"the worker died:\n{kids[0].log()[-1500:]}")
                    await asyncio.sleep(0.01)
                drained = await server_cpu(redis) - before
                if timing is not None:
                    timing.append(time.monotonic() - began)
    finally:
        await redis.aclose()
    return created / n * 1e6, drained / n * 1e6


async def _baseline_cpu(bench: Bench, n: int) -> float:
    await bench.flush()
    redis = aioredis.from_url(bench.redis_url)
    try:
        before = await server_cpu(redis)
        for start in range(0, n, 100):
            async with redis.pipeline(transaction=False) as pipe:
                for i in range(start, min(n, start + 100)):
                    pipe.hset(f"raw:{i}", mapping={"state": "queued", "capability": "noop"})
                    for seq in range(1, 5):
                        pipe.xadd(f"raw:{i}:events", {"e": "x" * 200}, id=f"{seq}-0")
                await pipe.execute()
        return (await server_cpu(redis) - before) / n * 1e6
    finally:
        await redis.aclose()


async def _round_trips(bench: Bench, n: int) -> Counter[str]:
    """Every command clients sent while `n` executions ran one after the other, by name
    (MONITOR shows a script's own commands as the script's, `lua`: not counted)."""
    await bench.flush()
    sent: Counter[str] = Counter()
    watcher = aioredis.from_url(bench.redis_url)
    with children() as kids:
        kids.append(majordomus_worker(bench, MAX_JOBS))
        await wait_for_workers(bench, 1)
        async with bench.engine() as engine:
            monitor = watcher.monitor()
            async with monitor as m:
                ready = asyncio.Event()

                async def count() -> None:
                    ready.set()
                    async for command in m.listen():
                        if command.get("client_type") == "lua":
                            continue
                        name = str(command.get("command", "")).split(" ", 1)[0].upper()
                        sent[name] += 1

                counter = asyncio.create_task(count())
                await ready.wait()
                finished = [part.finished for part in engine.store.keys.partitions]
                for done in range(1, n + 1):
                    await engine.start("bench.noop", {})
                    while sum([int(await watcher.zcard(f)) for f in finished]) < done:
                        await asyncio.sleep(0.001)
                counter.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await counter
    await watcher.aclose()
    # Not an execution's: the bench's own look for the end (ZCARD), the connections' set-up.
    for own in ("ZCARD", "CLIENT", "SELECT", "HELLO", "MONITOR", "INFO", "PING"):
        sent.pop(own, None)
    return sent
