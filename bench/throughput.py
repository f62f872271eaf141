"""Throughput: no-op executions a second, beside plain arq no-op jobs a second.

With 1 and then 2 worker processes (each `max_jobs` 10), a round enqueues N no-op units of
work as fast as one client can while the workers are already polling, and times from just
before the first enqueue to the moment the last one is seen finished: the rate is N over
that time, so it counts the enqueueing, the pick-up and the drain alike, the same way on
both sides. majordomus: `Engine.start("bench.noop", {})`, finished when the `idx:finished`
index has grown by N (each is then `succeeded`, with its four lifecycle events). arq: the
same no-op as `enqueue_job("noop")` on a queue of its own, finished when all N results
exist (arq keeps results by default). Both enqueue from 16 concurrent tasks of the one
client process and look for the end every 10 ms, so a round may read up to 10 ms slow on
either side.

Rounds alternate (majordomus, arq, majordomus, ...), each on freshly started workers of its
side alone and an emptied database; each side's figure is its best round, since the other
processes of a shared machine only ever slow a round down. The baseline polls every 0.01 s: at arq's
default 0.5 s it sleeps between batches of pulled jobs and measures its poll delay rather
than its work (that figure is noted, from one round, in the full run). This does not
measure events delivered to followers (`events`, `live`), nor work that takes time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from arq.connections import RedisSettings, create_pool
from arq.constants import result_key_prefix

from bench.harness import (
    Bench,
    Child,
    Row,
    arq_worker,
    children,
    fan_out,
    majordomus_worker,
    wait_for_arq_worker,
    wait_for_workers,
)

MAX_JOBS = 10
ENQUEUERS = 16
"""Concurrent enqueueing tasks of the one client process, on both sides."""
POLL = 0.01
ARQ_POLL_DELAY = 0.01
GOAL = 0.8

Drain = Callable[[int], Awaitable[float]]


async def run(bench: Bench) -> list[Row]:
    rounds = bench.size(3, 1)
    n = bench.size(1000, 50)
    rows: list[Row] = []
    for workers in (1, 2):
        ours, theirs = await _alternate(bench, workers, rounds, n)
        ratio = max(ours) / max(theirs)
        plural = "s" if workers > 1 else ""
        rows.append(
            Row(
                "throughput",
                f"no-op executions/s, {workers} worker{plural}",
                max(ours),
                "/s",
                baseline=max(theirs),
                baseline_name=f"plain arq no-op jobs/s, poll_delay {ARQ_POLL_DELAY:g} s",
                goal=f">= {GOAL}x plain arq",
                met=ratio >= GOAL,
            )
        )
        seen = f"rounds: majordomus {_rates(ours)}, arq {_rates(theirs)}"
        if not bench.quick:
            slow = await _round_arq(bench, workers, n, 0.5)
            seen += f"; plain arq at its default poll_delay 0.5 s: {slow:.0f}/s"
        bench.note(f"throughput, {workers} worker{plural}: {seen}.")
    bench.note(
        f"throughput: best of {rounds} alternating round(s) of {n} per side, max_jobs "
        f"{MAX_JOBS}, enqueued by {ENQUEUERS} concurrent tasks of one client while the "
        "workers poll; rate = N / (first enqueue .. last seen finished, looked for every "
        "10 ms)."
    )
    return rows


def _rates(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values) + " /s"


async def _alternate(
    bench: Bench, workers: int, rounds: int, n: int
) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        ours.append(await _round_ours(bench, workers, n))
        theirs.append(await _round_arq(bench, workers, n, ARQ_POLL_DELAY))
    return ours, theirs


async def _round_ours(bench: Bench, workers: int, n: int) -> float:
    await bench.flush()
    with children() as kids:
        kids.extend(majordomus_worker(bench, MAX_JOBS) for _ in range(workers))
        await wait_for_workers(bench, workers)
        async with bench.engine() as engine:
            return await _drain_ours(engine, n, kids)


async def _round_arq(bench: Bench, workers: int, n: int, poll_delay: float) -> float:
    await bench.flush()
    queue = f"{bench.prefix}:arq"
    with children() as kids:
        kids.extend(arq_worker(bench, queue, MAX_JOBS, poll_delay) for _ in range(workers))
        for kid in kids:
            await wait_for_arq_worker(bench, kid)
        async with _arq_client(bench, queue) as pool:
            return await _drain_arq(pool, n, kids)


class _arq_client:
    """An arq pool on the run's Redis whose jobs go to `queue`."""

    def __init__(self, bench: Bench, queue: str) -> None:
        self.settings = RedisSettings.from_dsn(bench.redis_url)
        self.queue = queue
        self.pool: Any = None

    async def __aenter__(self) -> Any:
        self.pool = await create_pool(self.settings, default_queue_name=self.queue)
        return self.pool

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.aclose()


async def _drain_ours(engine: Any, n: int, kids: list[Child]) -> float:
    async def finished() -> int:
        return int(await engine.store.finished_count())

    before = await finished()

    async def enqueue() -> None:
        await engine.start("bench.noop", {})

    async def done() -> int:
        return await finished() - before

    await _fill_pool(engine.redis)
    return await _timed(n, enqueue, done, kids)


async def _drain_arq(pool: Any, n: int, kids: list[Child]) -> float:
    result_keys: list[str] = []

    async def enqueue() -> None:
        job = await pool.enqueue_job("noop")
        assert job is not None
        result_keys.append(result_key_prefix + job.job_id)

    async def done() -> int:
        return int(await pool.exists(*result_keys))

    await _fill_pool(pool)
    return await _timed(n, enqueue, done, kids)


async def _fill_pool(redis: Any) -> None:
    """Open the client's connections before the clock starts, on both sides alike."""
    await asyncio.gather(*(redis.ping() for _ in range(ENQUEUERS + 1)))


async def _timed(
    n: int,
    enqueue: Callable[[], Awaitable[None]],
    done: Callable[[], Awaitable[int]],
    kids: list[Child],
) -> float:
    """N enqueued by concurrent tasks; answers N over first enqueue .. all done."""
    t0 = time.perf_counter()
    await fan_out(n, enqueue, ENQUEUERS)
    deadline = t0 + 120
    while await done() < n:
        if time.perf_counter() > deadline or not all(k.alive() for k in kids):
            logs = "\n".join(k.log()[-1500:] for k in kids)
            raise RuntimeError(f"only {await done()} of {n} finished:\n{logs}")
        await asyncio.sleep(POLL)
    return n / (time.perf_counter() - t0)
