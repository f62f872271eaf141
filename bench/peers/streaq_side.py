"""streaQ 7 on Redis streams: the no-op worker and its producers, run by the peers scenario.

Run with the streaQ venv's python as `streaq_side.py worker|enqueue --n N|pickup --n N`
(see `wire.py`). The worker is streaQ's `Worker` with `concurrency` 10 and its default
`prefetch` (as many again as the concurrency held in a local buffer, so a slot that frees
never waits on Redis), a blocking `XREADGROUP` for pick-up, on the asyncio backend (streaQ
runs on anyio; no uvloop). Tasks are `silent` (no log line each, as majordomus' arq logs are
off) and keep streaQ's default result ttl of 5 minutes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import wire
from streaq import Worker

ARGS = wire.arguments()
TALLY = wire.Tally()
worker = Worker(redis_url=ARGS.url, queue_name=ARGS.queue, concurrency=ARGS.concurrency)


@worker.task(name="noop", silent=True)
async def noop() -> None:
    TALLY.finish()


@worker.task(name="stamp", silent=True)
async def stamp() -> float:
    return time.time()


def work() -> None:
    wire.say(loaded=True)
    wire.wait_gate()
    wire.start_reporting(TALLY)
    worker.run_sync()


async def produce(args: Any) -> None:
    async with worker:
        if args.command == "enqueue":

            async def one_noop() -> None:
                await noop.enqueue()

            await wire.produce(args.n, one_noop)
            return

        async def one() -> float:
            task = await stamp.enqueue()
            return float((await task.result(timeout=30)).result)

        await wire.pickups(args.n, args.seed, one)


if __name__ == "__main__":
    if ARGS.command == "worker":
        work()
    else:
        asyncio.run(produce(ARGS))
