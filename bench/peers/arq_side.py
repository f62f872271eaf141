"""arq 0.28, plain: the no-op worker and its producers, run by the peers scenario.

Run with the arq venv's python as `arq_side.py worker|enqueue --n N|pickup --n N` (see
`wire.py` for the protocol). The worker is arq's own `Worker` with its defaults (pickle,
results kept an hour) but for `max_jobs` 10 and `poll_delay` 0.01 s: arq finds queued jobs
by polling its sorted set, and its default 0.5 s sleeps between batches (see
`bench.throughput`). arq has no blocking pick-up to turn on.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import wire
from arq.connections import RedisSettings, create_pool
from arq.worker import Worker

POLL_DELAY = 0.01
TALLY = wire.Tally()


async def noop(ctx: dict[str, Any]) -> None:
    TALLY.finish()


async def stamp(ctx: dict[str, Any]) -> float:
    return time.time()


def work(args: Any) -> None:
    worker = Worker(
        functions=[noop, stamp],
        queue_name=args.queue,
        max_jobs=args.concurrency,
        poll_delay=POLL_DELAY,
        redis_settings=RedisSettings.from_dsn(args.url),
        handle_signals=True,
    )
    wire.say(loaded=True)
    wire.wait_gate()
    wire.start_reporting(TALLY)
    worker.run()


async def produce(args: Any) -> None:
    pool = await create_pool(RedisSettings.from_dsn(args.url), default_queue_name=args.queue)
    try:
        if args.command == "enqueue":
            await wire.produce(args.n, lambda: pool.enqueue_job("noop"))
            return

        async def one() -> float:
            job = await pool.enqueue_job("stamp")
            assert job is not None
            return float(await job.result(timeout=30, poll_delay=0.001))

        await wire.pickups(args.n, args.seed, one)
    finally:
        await pool.aclose()


if __name__ == "__main__":
    arguments = wire.arguments()
    if arguments.command == "worker":
        work(arguments)
    else:
        asyncio.run(produce(arguments))
