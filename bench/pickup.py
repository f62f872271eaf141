"""Pick-up: how soon an idle worker starts a new execution, and what idling costs it.

Latency, majordomus: one `bench.noop` at a time into an idle worker (a random 20-50 ms
gap before each, so the worker is waiting every time), from just before `Engine.start`
to the moment the client reads the execution's `execution.started` (sequence 3) with a
blocking `XREAD` of its stream. It is measured on the client's clock because the event's
own `timestamp` is only millisecond-precise; so it includes the start's own round trip and
that read, which the worker's pick-up does not need (the event-timestamp figure is noted
as a cross-check). Plain arq: from just before `enqueue_job` to the wall-clock time its job
function (`bench.arq_baseline.stamp`) records as it starts, same machine, same clock; at
arq's default `poll_delay` of 0.5 s (fewer samples: each waits ~0.25 s on average, and the
gap before each is drawn over a whole poll period so that it lands at a random phase of
the worker's cycle) and at 0.01 s.

Idle CPU: each worker's CPU time over a few seconds of waiting, in percent of one core,
measured for all three at once after they settled. Nothing here measures a busy worker
(see `throughput`).
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime

from arq.connections import RedisSettings, create_pool

from bench.harness import (
    Bench,
    Child,
    Row,
    arq_worker,
    children,
    idle_cpu_percent,
    majordomus_worker,
    ms,
    percentile,
    wait_for_arq_worker,
    wait_for_workers,
)
from majordomus.engine import Engine
from majordomus.model import event_decoder, event_type_of

GAP = (0.020, 0.050)
P50_GOAL_MS = 5.0
P99_GOAL_MS = 25.0
IDLE_GOAL = 1.0
DEFAULT_POLL = 0.5
FAST_POLL = 0.01


async def run(bench: Bench) -> list[Row]:
    n_ours = bench.size(300, 15)
    n_fast = bench.size(300, 15)
    n_slow = bench.size(60, 2)
    idle_seconds = 0.5 if bench.quick else 5.0
    rng = random.Random(7)
    with children() as kids:
        ours = majordomus_worker(bench)
        slow = arq_worker(bench, f"{bench.prefix}:arq-slow", poll_delay=DEFAULT_POLL)
        fast = arq_worker(bench, f"{bench.prefix}:arq-fast", poll_delay=FAST_POLL)
        kids.extend([ours, slow, fast])
        await wait_for_workers(bench, 1)
        await wait_for_arq_worker(bench, slow)
        await wait_for_arq_worker(bench, fast)
        await asyncio.sleep(0.3 if bench.quick else 1.0)  # let start-up work settle
        idle = await asyncio.gather(
            *(idle_cpu_percent(k, idle_seconds) for k in (ours, slow, fast))
        )
        # At 0.5 s the gap spans a whole poll period, so a job lands at a random point of
        # the worker's cycle rather than just after the poll that found the previous one.
        slow_gap = (GAP[0], GAP[0] + DEFAULT_POLL)
        slow_ms = await _arq_latencies(
            bench, slow, f"{bench.prefix}:arq-slow", n_slow, rng, slow_gap, warm=1
        )
        slow.stop()
        fast_ms = await _arq_latencies(bench, fast, f"{bench.prefix}:arq-fast", n_fast, rng, GAP)
        fast.stop()
        async with bench.engine() as engine:
            ours_ms, stamped_ms = await _our_latencies(engine, ours, n_ours, rng)

    idle_ours, idle_slow, idle_fast = idle
    bench.note(
        f"pickup: {n_ours} majordomus executions, {n_fast} arq jobs at poll_delay "
        f"{FAST_POLL:g} s, {n_slow} at {DEFAULT_POLL:g} s, one at a time after a random "
        f"{GAP[0] * 1000:.0f}-{GAP[1] * 1000:.0f} ms gap (at {DEFAULT_POLL:g} s: "
        f"{GAP[0] * 1000:.0f}-{(GAP[0] + DEFAULT_POLL) * 1000:.0f} ms, a random phase of "
        "its poll); majordomus timed on the client to "
        "a blocking read of `execution.started`, arq to its job's own start stamp. From "
        "the ms-precise event timestamps instead, majordomus: p50 "
        f"{percentile(stamped_ms, 50):.1f} ms, p99 {percentile(stamped_ms, 99):.1f} ms."
    )
    bench.note(
        f"pickup: idle CPU over {idle_seconds:g} s, all three workers at once; CPU time "
        f"ticks in 10 ms, so the resolution is {1 / idle_seconds:.1f} % of a core."
    )
    slow_name = f"plain arq, poll_delay {DEFAULT_POLL:g} s (default)"
    fast_name = f"plain arq, poll_delay {FAST_POLL:g} s"
    p50, p99 = percentile(ours_ms, 50), percentile(ours_ms, 99)
    return [
        Row("pickup", "start -> started, p50", p50, "ms", percentile(slow_ms, 50), slow_name,
            f"< {P50_GOAL_MS:g} ms", p50 < P50_GOAL_MS, higher_is_better=False),
        Row("pickup", "start -> started, p99", p99, "ms", percentile(slow_ms, 99), slow_name,
            f"< {P99_GOAL_MS:g} ms", p99 < P99_GOAL_MS, higher_is_better=False),
        Row("pickup", "start -> started, p50", p50, "ms", percentile(fast_ms, 50), fast_name,
            higher_is_better=False),
        Row("pickup", "start -> started, p99", p99, "ms", percentile(fast_ms, 99), fast_name,
            higher_is_better=False),
        Row("pickup", "idle worker CPU", idle_ours, "% of a core", idle_slow, slow_name,
            f"< {IDLE_GOAL:g} %", idle_ours < IDLE_GOAL, higher_is_better=False),
        Row("pickup", "idle worker CPU", idle_ours, "% of a core", idle_fast, fast_name,
            higher_is_better=False),
    ]


async def _our_latencies(
    engine: Engine, worker: Child, n: int, rng: random.Random
) -> tuple[list[float], list[float]]:
    """(client-timed, event-timestamp-timed) start -> started latencies in ms."""
    for _ in range(3):  # warm both sides' code paths and connections; not counted
        await _one_start(engine, worker)
    client: list[float] = []
    stamped: list[float] = []
    for _ in range(n):
        await asyncio.sleep(rng.uniform(*GAP))
        measured, by_stamp = await _one_start(engine, worker)
        client.append(measured)
        stamped.append(by_stamp)
    return client, stamped


async def _one_start(engine: Engine, worker: Child) -> tuple[float, float]:
    wall0 = time.time()
    t0 = time.perf_counter()
    snap = await engine.start("bench.noop", {})
    while True:
        raws = await engine.store.read_stream_after(snap.id, 2, 5000)
        elapsed = time.perf_counter() - t0
        if not raws:
            if not worker.alive() or elapsed > 30:
                raise RuntimeError(f"{snap.id} was not started:\n{worker.log()[-2000:]}")
            continue
        event = event_decoder.decode(raws[0])
        if event_type_of(event) != "execution.started":
            raise RuntimeError(f"{snap.id}: expected execution.started, read {raws[0]!r}")
        started = datetime.fromisoformat(event.timestamp.replace("Z", "+00:00")).timestamp()
        return ms(elapsed), ms(started - wall0)


async def _arq_latencies(
    bench: Bench,
    worker: Child,
    queue: str,
    n: int,
    rng: random.Random,
    gap: tuple[float, float],
    warm: int = 3,
) -> list[float]:
    pool = await create_pool(RedisSettings.from_dsn(bench.redis_url), default_queue_name=queue)
    try:
        out: list[float] = []
        for i in range(n + warm):
            await asyncio.sleep(rng.uniform(*gap))
            key = f"{queue}:started:{i}"
            t0 = time.time()
            await pool.enqueue_job("stamp", key)
            deadline = time.monotonic() + 30
            while (raw := await pool.get(key)) is None:
                if time.monotonic() > deadline or not worker.alive():
                    raise RuntimeError(f"arq job {i} did not start:\n{worker.log()[-2000:]}")
                await asyncio.sleep(0.002)
            if i >= warm:  # the first ones warm up, as on our side
                out.append(ms(float(raw) - t0))
        return out
    finally:
        await pool.aclose()
