"""taskiq 0.13 with taskiq-redis' `RedisStreamBroker` and a Redis result backend: the
no-op tasks and their producers, run by the peers scenario.

The worker is taskiq's own command, run by the scenario with the taskiq venv:
`taskiq worker taskiq_side:broker --workers 1 --max-async-tasks 10 --max-prefetch 10
--log-level WARNING` (one worker child per command; 10 tasks at once; 10 more deliveries held
ready, as streaQ's default prefetch holds; no log line a task). Its pick-up is a blocking
`XREADGROUP` of up to 100 entries; results go to `RedisAsyncResultBackend` (kept 600 s). The
consumer group starts at the stream's beginning (`consumer_id="0"`) so that jobs enqueued
before any worker ran are read too. The producers run as `python taskiq_side.py enqueue --n N`
or `pickup --n N` (see `wire.py`); pick-up waits with `wait_result` polling every 1 ms.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import wire
from taskiq import TaskiqEvents, TaskiqState
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

URL = os.environ.get(wire.URL_ENV, "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get(wire.QUEUE_ENV, "peer")
TALLY = wire.Tally()
broker = RedisStreamBroker(URL, queue_name=QUEUE, consumer_id="0").with_result_backend(
    RedisAsyncResultBackend(URL, result_ex_time=600)
)


@broker.task(task_name="noop")
async def noop() -> None:
    TALLY.finish()


@broker.task(task_name="stamp")
async def stamp() -> float:
    return time.time()


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def gate(state: TaskiqState) -> None:
    """In the worker child, once the broker is connected: wait for the round's start."""
    wire.say(loaded=True)
    await wire.wait_gate_async()
    wire.start_reporting(TALLY)


async def produce(args: Any) -> None:
    await broker.startup()
    try:
        if args.command == "enqueue":
            await wire.produce(args.n, noop.kiq)
            return

        async def one() -> float:
            task = await stamp.kiq()
            result = await task.wait_result(check_interval=0.001, timeout=30)
            return float(result.return_value)

        await wire.pickups(args.n, args.seed, one)
    finally:
        await broker.shutdown()


if __name__ == "__main__":
    asyncio.run(produce(wire.arguments()))
