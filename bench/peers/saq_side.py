"""SAQ 0.26 on Redis: the no-op worker and its producers, run by the peers scenario.

Run with the SAQ venv's python as `saq_side.py worker|enqueue --n N|pickup --n N` (see
`wire.py`). The worker is SAQ's `Worker` with `concurrency` 10 and its defaults otherwise,
which are already its fastest: `dequeue_timeout` 0 (a blocking `BLMOVE` waits for the next
job, so there is no poll delay) and `poll_interval` 0 (listen/notify, not polling). Jobs keep
SAQ's defaults (results kept 600 s). The pick-up producer waits with `Queue.apply`, polling
every 1 ms.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import wire
from saq import Queue, Worker

TALLY = wire.Tally()


async def noop(ctx: dict[str, Any]) -> None:
    TALLY.finish()


async def stamp(ctx: dict[str, Any]) -> float:
    return time.time()


async def work(args: Any) -> None:
    queue = Queue.from_url(args.url, name=args.queue)
    worker = Worker(queue, functions=[noop, stamp], concurrency=args.concurrency)
    wire.say(loaded=True)
    await wire.wait_gate_async()
    wire.start_reporting(TALLY)
    await queue.connect()
    try:
        await worker.start()
    finally:
        await queue.disconnect()


async def produce(args: Any) -> None:
    queue = Queue.from_url(args.url, name=args.queue)
    await queue.connect()
    try:
        if args.command == "enqueue":
            await wire.produce(args.n, lambda: queue.enqueue("noop"))
            return

        async def one() -> float:
            # apply polls the job every poll_interval (0.5 s by default), which would only
            # space the jobs out: the latency is the job's own start stamp either way.
            return float(await queue.apply("stamp", timeout=30, poll_interval=0.001))

        await wire.pickups(args.n, args.seed, one)
    finally:
        await queue.disconnect()


if __name__ == "__main__":
    arguments = wire.arguments()
    asyncio.run(work(arguments) if arguments.command == "worker" else produce(arguments))
