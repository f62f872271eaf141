"""CLI end to end: the wall time of one `majordomus run` from a shell, beside arq's nearest.

majordomus: the subprocess `python -m majordomus.cli run executions.demonstrate --input
'{"steps":1}'` (one step, no delay; it goes straight to Redis, not through the API) with a
majordomus worker already waiting, timed from spawn to exit: interpreter start-up, imports,
the start, following the execution's events live to its end, and printing them. arq has no
CLI that runs a job and waits for it, so its nearest equivalent is a Python subprocess that
does `create_pool`, `enqueue_job("noop")` and `await job.result()` (its default
`poll_delay` of 0.5 s) against a plain arq worker at its default poll delay, timed the
same way: both include an interpreter's start-up, so like is compared with like. The
figure is the median over the runs, which alternate between the two sides.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from bench.harness import (
    ROOT,
    Bench,
    Row,
    arq_worker,
    children,
    majordomus_worker,
    median,
    ms,
    wait_for_arq_worker,
    wait_for_workers,
)

ARQ_CLIENT = """
import asyncio, os, sys
from arq.connections import RedisSettings, create_pool

async def main():
    pool = await create_pool(RedisSettings.from_dsn(os.environ["MAJORDOMUS_REDIS_URL"]),
                             default_queue_name=sys.argv[1])
    job = await pool.enqueue_job("noop")
    print(await job.result(timeout=30))
    await pool.aclose()

asyncio.run(main())
"""
"""The arq side: enqueue a no-op, wait for its result with arq's default polling, print it."""


async def run(bench: Bench) -> list[Row]:
    runs = bench.size(10, 2)
    queue = f"{bench.prefix}:arq-cli"
    ours_argv = [
        sys.executable, "-m", "majordomus.cli", "run", "executions.demonstrate",
        "--input", '{"steps":1}',
    ]
    arq_argv = [sys.executable, "-c", ARQ_CLIENT, queue]
    ours: list[float] = []
    theirs: list[float] = []
    with children() as kids:
        kids.append(majordomus_worker(bench))
        kids.append(arq_worker(bench, queue))
        await wait_for_workers(bench, 1)
        await wait_for_arq_worker(bench, kids[1])
        for _ in range(runs):
            ours.append(await _timed(bench, ours_argv))
            theirs.append(await _timed(bench, arq_argv))
    bench.note(
        f"cli: median of {runs} alternating runs each; majordomus `run` of "
        "executions.demonstrate {steps: 1} straight to Redis, arq a script enqueueing a "
        "no-op and awaiting job.result() (poll 0.5 s) against a worker at poll_delay 0.5 s; "
        f"all runs (ms): majordomus {_list(ours)}, arq {_list(theirs)}."
    )
    return [
        Row(
            "cli",
            "run one execution to its end, wall time",
            median(ours),
            "ms",
            baseline=median(theirs),
            baseline_name="python script: arq enqueue_job + job.result()",
            higher_is_better=False,
        )
    ]


def _list(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values)


async def _timed(bench: Bench, argv: list[str]) -> float:
    """The subprocess's wall time in ms, from spawn to exit; it must succeed."""
    t0 = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=bench.env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    elapsed = time.perf_counter() - t0
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:5])} exited {process.returncode}:\n"
            f"{out.decode(errors='replace')[-1500:]}\n{err.decode(errors='replace')[-1500:]}"
        )
    return ms(elapsed)
