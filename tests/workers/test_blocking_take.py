"""The take a worker with room makes on one Redis (`QueueStore.take_blocking`): a blocking pop
of the wake-up list with the take behind it in the same write, so Redis takes a start the
moment it is made. It takes only what a wake-up announced, at most one; a pop that times
out takes nothing and says when work is due; a stopping worker's takes nothing and gives
its wake-up to another; wake-ups for work already taken are dropped; and a worker stopped
while it waits there strands nothing. A worker that runs executions and has a free slot
waits there too, hearing no wake-up channel, and a full one goes there as a slot frees."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.start_options import StartOptions
from tests.conftest import (
    FOREVER_MS,
    LIVENESS_SECONDS,
    make_settings,
    running_worker,
    until,
    waiting_in_redis,
)
from tests.workers.test_take_job import take

WORKER = "blocker"


async def _leased(engine: Engine, worker: str = WORKER) -> None:
    await engine.redis.set(engine.store.keys.partitions[0].lease(worker), 1, px=60_000)


async def test_a_start_made_while_the_take_waits_is_taken_by_it(engine: Engine) -> None:
    store = engine.store
    assert store.can_block
    await _leased(engine)
    waiting = asyncio.ensure_future(
        store.take_blocking(WORKER, store.next_token(), FOREVER_MS / 1000)
    )
    await asyncio.sleep(0.2)  # time passes: the take waits
    assert not waiting.done()
    snap = await engine.start("tests.noop", {})
    # Taken at once: a take that waited its whole wait would outlive the test.
    took = await asyncio.wait_for(waiting, LIVENESS_SECONDS)
    assert [t.execution_id for t in took.taken] == [snap.id]
    after = await engine.get(snap.id)
    assert after.state == "running" and after.worker == WORKER
    # Its `started` is stamped when the take ran, not when it was sent.
    assert after.started_at is not None and after.started_at >= snap.created_at


async def test_a_wait_that_times_out_takes_nothing_and_says_when_work_is_due(
    engine: Engine,
) -> None:
    store = engine.store
    await _leased(engine)
    due = int(time.time() * 1000) + 60_000
    await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
    await take(engine, worker=WORKER)  # the delayed start's wake-up, consumed
    took = await store.take_blocking(WORKER, store.next_token(), 0.2)
    assert took.taken == [] and took.next_due_ms == due


async def test_one_at_most_and_the_rest_said_due_now(engine: Engine) -> None:
    store = engine.store
    await _leased(engine)
    made = [(await engine.start("tests.noop", {})).id for _ in range(3)]
    took = await store.take_blocking(WORKER, store.next_token(), 1.0)
    assert [t.execution_id for t in took.taken] == made[:1]
    assert took.next_due_ms is not None and took.next_due_ms <= time.time() * 1000
    rest = await take(engine, worker=WORKER)
    assert [t.execution_id for t in rest.taken] == made[1:]
    # Nothing left: the wake-ups of what is taken are gone, so no wait returns for nothing.
    assert await engine.redis.llen(store.keys.partitions[0].wakeup) == 0


async def test_a_stopping_workers_wait_takes_nothing_and_hands_its_wake_up_on(
    engine: Engine,
) -> None:
    store = engine.store
    await _leased(engine)
    await _leased(engine, "other")
    waiting = asyncio.ensure_future(store.take_blocking(WORKER, store.next_token(), 5.0))
    await asyncio.sleep(0.2)  # for the take to be waiting in Redis (it gives no sign)
    await store.stop_blocking(WORKER)
    snap = await engine.start("tests.noop", {})
    assert (await waiting).taken == []
    assert (await engine.get(snap.id)).state == "queued"
    other = await store.take_blocking("other", store.next_token(), 1.0)
    assert [t.execution_id for t in other.taken] == [snap.id]


async def test_a_worker_stopped_while_it_waits_in_redis_takes_no_more_work(
    redis: Any, engine: Engine, settings: Any
) -> None:
    async with running_worker(redis, settings) as worker:
        await until(lambda: waiting_in_redis(worker))
        worker.handle_sig(signal.SIGTERM)
        # Once its mark is in Redis (a start before it may still be taken, and is run).
        stopping = engine.store.keys.partitions[0].worker_stopping(worker.runtime.worker_id)
        await until(lambda: engine.redis.exists(stopping))
        snap = await engine.start("tests.noop", {})
        done, _ = await asyncio.wait({worker.main_task}, timeout=10)
        assert done, "the worker did not stop"
        # The stopping worker took nothing: the start waits for another worker.
        assert (await engine.get(snap.id)).state == "queued"
    async with running_worker(redis, settings):
        assert (await engine.wait(snap.id, 10_000)).state == "succeeded"


async def test_a_busy_worker_with_room_waits_in_redis_and_hears_no_wake_up_channel(
    redis: Any, redis_url: str
) -> None:
    # A fallback poll that never comes: only the wake-up list can bring the second start.
    # Channels are the server's, not a database's: a prefix of the test's own keeps other
    # suites' workers on the same server out of the count.
    cfg = make_settings(redis_url, poll_seconds=FOREVER_MS / 1000, key_prefix=f"mdbt{os.getpid()}")
    engine = Engine(redis, REGISTRY, cfg)
    keys = engine.store.keys
    async with running_worker(redis, cfg, max_jobs=2) as worker:
        long = await engine.start("tests.sleepy", {"seconds": 30})
        await until(lambda: _state_is(engine, long.id, "running"))
        await until(lambda: waiting_in_redis(worker))
        assert worker.job_counter == 1
        (_, wake), (_, cancel) = await engine.redis.pubsub_numsub(keys.wake_channel, keys.cancel_channel)
        assert (wake, cancel) == (0, 1), "the wake-up list is its signal; cancels still come by channel"
        snap = await engine.start("tests.noop", {})
        # Taken by the waiting take: a poll would come long after this wait gives up.
        assert (await engine.wait(snap.id, LIVENESS_SECONDS * 1000)).state == "succeeded"
        await engine.cancel(long.id)
        assert (await engine.wait(long.id, 10_000)).state == "cancelled"


async def test_a_full_worker_takes_a_start_made_meanwhile_as_soon_as_a_slot_frees(
    redis: Any, redis_url: str, engine: Engine
) -> None:
    # A fallback poll that never comes: only the freed slot can bring the second start.
    cfg = make_settings(redis_url, poll_seconds=FOREVER_MS / 1000)
    async with running_worker(redis, cfg, max_jobs=1) as worker:
        first = await engine.start("tests.sleepy", {"seconds": 60})  # until cancelled below
        await until(lambda: _state_is(engine, first.id, "running"))
        assert worker.job_counter == 1 and not await waiting_in_redis(worker)
        second = await engine.start("tests.noop", {})  # its wake-up waits on the list
        await asyncio.sleep(0.2)  # time passes: the slot is still held
        assert (await engine.get(second.id)).state == "queued"
        await engine.cancel(first.id)  # the slot frees
        done = await engine.wait(second.id, LIVENESS_SECONDS * 1000)
        ended = await engine.get(first.id)
    assert ended.state == "cancelled" and done.state == "succeeded"
    assert _epoch(done.started_at) >= _epoch(ended.finished_at)  # once the slot freed
    print(f"started {_epoch(done.started_at) - _epoch(ended.finished_at):.3f} s after")


async def _state_is(engine: Engine, execution_id: str, state: str) -> bool:
    return (await engine.get(execution_id)).state == state


def _epoch(stamp: Any) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


async def test_a_busy_worker_stopped_while_it_waits_in_redis_finishes_its_work_and_takes_none(
    redis: Any, redis_url: str, engine: Engine
) -> None:
    cfg = make_settings(redis_url, shutdown_grace=5.0)
    async with running_worker(redis, cfg, max_jobs=2) as worker:
        busy = await engine.start("tests.sleepy", {"seconds": 0.5})
        await until(lambda: _state_is(engine, busy.id, "running"))
        await until(lambda: waiting_in_redis(worker))
        worker.handle_sig(signal.SIGTERM)
        stopping = engine.store.keys.partitions[0].worker_stopping(worker.runtime.worker_id)
        await until(lambda: engine.redis.exists(stopping))
        late = await engine.start("tests.noop", {})
        done, _ = await asyncio.wait({worker.main_task}, timeout=10)
        assert done, "the worker did not stop"
        # What it ran was given its grace; what came after the mark was left for another.
        assert (await engine.get(busy.id)).state == "succeeded"
        assert (await engine.get(late.id)).state == "queued"
