"""Schedule lateness: from a tick's time to its execution's `execution.started`.

    python -m bench.schedule_lateness                 # 30 ticks, 3 workers
    python -m bench.schedule_lateness --ticks 60 --workers 1

A schedule of every second (`* * * * * *`) on `bench.noop`, ticked by `--workers`
majordomus worker processes at once (each tick must start exactly one execution, and the
run says so), for `--ticks` ticks. Each execution's tick is read from its idempotency key
(`schedule:<id>:<tick epoch ms>`); the figures are its `created_at` (the ticker's part:
waking, reading the schedule, the start) and its `started_at` (the worker's pick-up on top)
less the tick, both on the machine's clock at millisecond precision, p50 and p99.

The baseline is arq's own `cron` job of every second, run by one plain arq worker at its
default poll (0.5 s; its cron enqueues a run ahead, deferred to its tick, and checks once a
poll) for as many ticks: from each tick to when its job started (`bench.arq_baseline`),
the runs of its first second left out as ours are.

Scenario `schedules` of `python -m bench`; it takes `--ticks` seconds of wall time (twice:
ours, then arq's) whatever the machine.
Redis: as `python -m bench` finds it (`--redis-url`, `MAJORDOMUS_BENCH_REDIS_URL`, database
14 of the local Redis); the database is flushed first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from datetime import datetime

from bench.harness import (
    Bench,
    Row,
    arq_worker,
    children,
    majordomus_worker,
    percentile,
    wait_for_arq_worker,
    wait_for_workers,
    workdir,
)
from majordomus.ticker import RELOAD_SECONDS

SCENARIO = "schedules"
TICKS = 30
WORKERS = 3
P99_GOAL_MS = 50.0


def epoch_ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


async def run(bench: Bench, ticks: int | None = None, workers: int = WORKERS) -> list[Row]:
    ticks = ticks or bench.size(TICKS, 3)
    with children() as started:
        started.extend(majordomus_worker(bench) for _ in range(workers))
        await wait_for_workers(bench, workers)
        async with bench.engine() as engine:
            await asyncio.sleep(1.0)  # the tickers' first load and sync are done
            made = await engine.invoke(
                "schedules.create",
                {"capability": "bench.noop", "cron": "* * * * * *", "name": "lateness"},
            )
            await asyncio.sleep(ticks + 0.5)
            await engine.invoke("schedules.pause", {"id": made.id})
            await asyncio.sleep(1.5)
            listed = await engine.list(capability="bench.noop")
            runs = [s for s in listed.executions if s.schedule == made.id]
            finals = [await engine.wait(s.id, 10_000) for s in runs]
    every = sorted((int(str(s.idempotency_key).rsplit(":", 1)[1]), s) for s in finals)
    distinct = len({tick for tick, _ in every})
    # The ticks a ticker knew of in time: not those of the first second after the create,
    # which wait for the tickers' reload (up to RELOAD_SECONDS), noted apart.
    known_from = epoch_ms(made.created_at) + RELOAD_SECONDS * 1000
    keyed = [(tick, s) for tick, s in every if tick > known_from]
    first = [epoch_ms(str(s.started_at)) - tick for tick, s in every if tick <= known_from]
    created = [epoch_ms(s.created_at) - tick for tick, s in keyed]
    begun = [epoch_ms(str(s.started_at)) - tick for tick, s in keyed if s.started_at]
    bench.note(
        f"schedules: {len(every)} executions for {distinct} ticks over {ticks} s with "
        f"{workers} workers ticking (exactly one per tick: {len(every) == distinct}); the "
        f"figures are of the {len(keyed)} ticks after the first second; the first "
        f"{len(first)}, before the tickers' reload, started {', '.join(f'{v:.0f}' for v in first)} ms late"
    )
    arq = await arq_lateness(bench, ticks)
    bench.note(f"schedules: arq's cron ran {len(arq)} ticks after its first second")
    p99 = percentile(begun, 99)
    return [
        Row(SCENARIO, "tick to execution.created p50", percentile(created, 50), "ms",
            higher_is_better=False),
        Row(SCENARIO, "tick to execution.created p99", percentile(created, 99), "ms",
            higher_is_better=False),
        Row(SCENARIO, "tick to execution.started p50", percentile(begun, 50), "ms",
            percentile(arq, 50), ARQ_CRON, higher_is_better=False),
        Row(SCENARIO, "tick to execution.started p99", p99, "ms", percentile(arq, 99), ARQ_CRON,
            goal=f"< {P99_GOAL_MS:.0f} ms", met=p99 < P99_GOAL_MS, higher_is_better=False),
    ]  # fmt: skip


ARQ_CRON = "plain arq cron, every second, poll_delay 0.5 s (default): tick to job start"


async def arq_lateness(bench: Bench, ticks: int) -> list[float]:
    """ms from each tick to its start, for arq's cron over `ticks` ticks after its first second."""
    queue = f"{bench.prefix}:arq-cron"
    client = bench.redis()
    try:
        with children() as started:
            worker = arq_worker(bench, queue, cron=True)
            started.append(worker)
            await wait_for_arq_worker(bench, worker)
            await asyncio.sleep(1.0)
            await client.delete(f"{queue}:lateness")
            await asyncio.sleep(ticks + 0.5)
            raw = await client.lrange(f"{queue}:lateness", 0, -1)
    finally:
        await client.aclose()
    return [float(v) for v in raw]


def main(argv: Sequence[str] | None = None) -> int:
    from bench.__main__ import DEFAULT_URL, print_table

    parser = argparse.ArgumentParser(prog="python -m bench.schedule_lateness")
    parser.add_argument("--ticks", type=int, default=TICKS)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument(
        "--redis-url", default=os.environ.get("MAJORDOMUS_BENCH_REDIS_URL", DEFAULT_URL)
    )
    args = parser.parse_args(argv)
    bench = Bench(redis_url=args.redis_url, quick=False, workdir=workdir())

    async def body() -> list[Row]:
        await bench.flush()
        try:
            return await run(bench, args.ticks, args.workers)
        finally:
            await bench.flush()

    rows = asyncio.run(body())
    print_table(rows)
    for note in bench.notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
