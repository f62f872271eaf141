"""The queue holds only work that can run: a worker takes a job off it in one atomic step,
an execution that ends leaves no trace in it, and an execution held back by its
capability's `max_concurrency` waits outside it, costing nothing, first come first served."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.local.embedded import EmbeddedRedis
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from majordomus.store.queue import Take
from tests.conftest import make_settings, running_worker, until
from tests.workers.test_executions import types_of

WORKER = "taker"


async def queue_of(engine: Engine) -> list[str]:
    return [m.decode() for m in await engine.redis.zrange(engine.store.keys.partitions[0].queue, 0, -1)]


async def take(engine: Engine, count: int = 10, token: str | None = None, worker: str = WORKER) -> Take:
    """A take by a worker whose lease holds (a take by a lapsed one takes nothing)."""
    await engine.redis.set(engine.store.keys.partitions[0].lease(worker), 1, px=60_000)
    return await engine.store.take(worker, count, token or engine.store.next_token())


async def test_a_due_execution_is_taken_once_off_the_queue_and_started(engine: Engine) -> None:
    snap = await engine.start("tests.noop", {})
    took = await take(engine)
    assert [(t.execution_id, t.capability, t.sequence) for t in took.taken] == [
        (snap.id, "tests.noop", 3)
    ]
    assert took.next_due_ms is None
    assert await queue_of(engine) == []
    now = await engine.get(snap.id)
    assert (now.state, now.worker, now.attempt) == ("running", WORKER, 1)
    assert await types_of(engine, snap.id) == [
        "execution.created", "execution.queued", "execution.started"
    ]
    keys = engine.store.keys
    assert await engine.redis.smembers(keys.partitions[0].worker_running(WORKER)) == {snap.id.encode()}
    assert await engine.redis.zscore(keys.partitions[0].running, snap.id) is not None
    assert await engine.redis.zscore(keys.partitions[0].queued, snap.id) is None
    assert (await take(engine)).taken == []


async def test_a_batch_takes_at_most_its_count_oldest_first_and_says_what_is_left(
    engine: Engine,
) -> None:
    ids = [(await engine.start("tests.noop", {})).id for _ in range(5)]
    first = await take(engine, count=3)
    assert [t.execution_id for t in first.taken] == ids[:3]
    assert first.next_due_ms is not None  # due work left: the worker takes again at once
    rest = await take(engine, count=3)
    assert [t.execution_id for t in rest.taken] == ids[3:]
    assert rest.next_due_ms is None


async def test_the_worker_only_input_comes_with_the_take(engine: Engine) -> None:
    await engine.start("tests.login", {"user": "ada", "token": "s3cret"})
    (taken,) = (await take(engine)).taken
    assert taken.secret is not None and b"s3cret" in taken.secret


async def test_a_stale_entry_is_dropped_and_a_deferred_one_is_not_taken(engine: Engine) -> None:
    keys = engine.store.keys
    later = time.time() * 1000 + 60_000
    await engine.redis.zadd(keys.partitions[0].queue, {"forgotten": 1000})
    await engine.redis.zadd(keys.partitions[0].delayed, {"later": later})
    took = await take(engine)
    assert took.taken == []  # no execution behind "forgotten": dropped
    assert took.next_due_ms == pytest.approx(later)  # the worker sleeps until then
    assert await queue_of(engine) == []
    assert await engine.redis.zrange(keys.partitions[0].delayed, 0, -1) == [b"later"]


async def test_a_take_sent_again_answers_what_its_first_send_started(engine: Engine) -> None:
    """The answer of a take lost (a broken connection): the same call, with its token,
    answers the same executions and takes nothing more, so none is stranded running."""
    ids = [(await engine.start("tests.noop", {})).id for _ in range(2)]
    token = engine.store.next_token()
    first = await take(engine, count=2, token=token)
    late = (await engine.start("tests.noop", {})).id
    again = await take(engine, count=2, token=token)
    assert [t.execution_id for t in again.taken] == [t.execution_id for t in first.taken] == ids
    # Kept for far longer than a lease: a worker sends it again however long Redis was away.
    kept_ms = await engine.redis.pttl(engine.store.keys.partitions[0].worker_take(WORKER))
    assert kept_ms > 3_600_000, kept_ms
    assert await queue_of(engine) == [late]
    # One ended meanwhile (the sweeper's, say): no longer this worker's, not answered again.
    await engine.store.append(ids[0], [("execution.completed", b'{"output":{}}')])
    assert [t.execution_id for t in (await take(engine, token=token)).taken] == [ids[1]]
    assert [t.execution_id for t in (await take(engine)).taken] == [late]


async def test_a_worker_whose_lease_lapsed_takes_nothing(engine: Engine) -> None:
    snap = await engine.start("tests.noop", {})
    await engine.redis.delete(engine.store.keys.partitions[0].lease(WORKER))
    took = await engine.store.take(WORKER, 10, engine.store.next_token())
    assert took.lapsed and took.taken == []
    assert await queue_of(engine) == [snap.id]
    assert (await engine.get(snap.id)).state == "queued"


async def test_every_way_to_end_leaves_nothing_of_the_execution_in_the_queue(
    engine: Engine, worker: Any
) -> None:
    done = await engine.start("tests.noop", {})
    cancelled = await engine.start("tests.sleepy", {"seconds": 30})
    await engine.wait(done.id, 10_000)
    await until(lambda: _is_running(engine, cancelled.id))
    await engine.cancel(cancelled.id)
    await engine.wait(cancelled.id, 10_000)
    never_ran = (await engine.start("tests.noop", {})).id
    await engine.cancel(never_ran)
    keys = engine.store.keys
    assert await queue_of(engine) == []
    for xid in (done.id, cancelled.id, never_ran):
        assert await engine.redis.zscore(keys.partitions[0].queued, xid) is None
        assert await engine.redis.zscore(keys.partitions[0].running, xid) is None
        assert await engine.redis.zscore(keys.partitions[0].finished, xid) is not None
    runtime = worker.ctx["majordomus"]
    assert await engine.redis.scard(keys.partitions[0].worker_running(runtime.worker_id)) == 0


async def test_a_new_start_is_picked_up_with_thousands_running_or_ended_ahead_of_it(
    redis: Any, engine: Engine, settings: Any
) -> None:
    """10,000 executions running on another worker and ended ones leave the queue empty of
    them, so a free worker picks up a new start at once (it used to read only the first
    100 entries, all running elsewhere, and wait). The figures are printed, not asserted."""
    busy = "busy-worker"
    keys = engine.store.keys
    async with running_worker(redis, settings):
        empty = [await _pickup_ms(engine) for _ in range(20)]
    ids = [(await engine.start("tests.sleepy", {"seconds": 30})).id for _ in range(200)]
    await take(engine, count=100, worker=busy)
    for xid in ids[100:]:
        await engine.cancel(xid)
    # The other 9,900 as a bulk of running entries of that worker: the scripts' layout.
    async with redis.pipeline(transaction=False) as pipe:
        for i in range(9_900):
            pipe.sadd(keys.partitions[0].worker_running(busy), f"bulk-{i}")
        await pipe.execute()
    assert await queue_of(engine) == []
    await redis.set(keys.partitions[0].lease(busy), 1, px=60_000)  # alive: no sweep during the figures
    async with running_worker(redis, settings):
        loaded = [await _pickup_ms(engine) for _ in range(20)]
    empty.sort()
    loaded.sort()
    print(
        f"pickup p50, empty queue: {empty[10]:.2f} ms; with 10,000 running or ended ahead: "
        f"{loaded[10]:.2f} ms"
    )


async def _pickup_ms(engine: Engine) -> float:
    """Milliseconds from a start to its `execution.started`."""
    began = time.monotonic()
    snap = await engine.start("tests.noop", {})
    await until(lambda: _started(engine, snap.id), interval=0.0005)
    took = (time.monotonic() - began) * 1000
    assert (await engine.wait(snap.id, 10_000)).state == "succeeded"
    return took


async def _started(engine: Engine, execution_id: str) -> bool:
    return (await engine.get(execution_id)).state != "queued"


@pytest.fixture
async def private_engine() -> AsyncIterator[Engine]:
    """An engine on a redis-server of the test's own: `INFO commandstats` counts every
    client of a server, so counting needs a server nobody else uses."""
    with EmbeddedRedis() as server:
        client = connect(server.url, arq=True)
        yield Engine(client, REGISTRY, make_settings(server.url, poll_seconds=30.0))
        await client.aclose(close_connection_pool=True)


WINDOW_SECONDS = 3.0
"""How long each count of Redis commands lasts."""


@pytest.mark.usefixtures("spawns")
async def test_waiting_for_a_slot_holds_no_worker_and_makes_no_redis_traffic(
    private_engine: Engine,
) -> None:
    engine, redis = private_engine, private_engine.redis
    async with running_worker(redis, engine.settings, max_jobs=5):
        holder = await engine.start("tests.serial", {"seconds": 60})  # cancelled below
        await until(lambda: _is_running(engine, holder.id))
        # The same worker and holder for as long, first with nothing waiting, then with
        # 100 waiting: the difference is what waiting costs (retried every 50 ms, as it
        # used to be, 100 waiting cost some 6,000 commands a second).
        alone = await _commands_over(redis, WINDOW_SECONDS)
        waiting = [await engine.start("tests.serial", {"seconds": 0}) for _ in range(100)]
        await until(lambda: _waiting_all(engine, 100))
        assert await queue_of(engine) == []
        beside = await _commands_over(redis, WINDOW_SECONDS)
        print(f"Redis commands in {WINDOW_SECONDS:g} s, 100 executions waiting on a slot: {beside}; none: {alone}")
        # The two windows differ only by noise (a beat, a sweep or the minutely prune more
        # or less): waiting that cost traffic would show as thousands more.
        assert beside <= alone * 1.5 + 50, (alone, beside)
        assert {(await engine.get(w.id)).state for w in waiting} == {"queued"}
        await engine.cancel(holder.id)
        ended = [await engine.wait(w.id, 30_000) for w in waiting]
    assert all(e.state == "succeeded" for e in ended)
    starts = [e.started_at for e in ended]
    assert starts == sorted(starts), "the oldest waiting one starts first"


async def _commands_over(redis: Any, seconds: float) -> int:
    await redis.config_resetstat()
    await asyncio.sleep(seconds)
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values()) - 1  # less our own INFO


async def _is_running(engine: Engine, execution_id: str) -> bool:
    return (await engine.get(execution_id)).state == "running"


async def _waiting_all(engine: Engine, count: int) -> bool:
    return await engine.store.waiting_count("tests.serial") == count


async def test_a_slot_freed_moves_the_oldest_waiting_execution_into_the_queue(
    engine: Engine,
) -> None:
    first = await engine.start("tests.serial", {"seconds": 1})
    second = await engine.start("tests.serial", {"seconds": 1})
    await engine.start("tests.serial", {"seconds": 1})
    took = await take(engine, count=3)
    assert [t.execution_id for t in took.taken] == [first.id]  # the others wait for the slot
    assert await queue_of(engine) == []
    assert await engine.store.waiting_count("tests.serial") == 2
    await engine.store.append(first.id, [("execution.completed", b'{"output":{"seconds":1}}')])
    # its terminal event freed the slot ...
    assert await queue_of(engine) == [second.id]  # ... and the oldest waiting one is back
    assert await engine.store.waiting_count("tests.serial") == 1


async def test_a_take_cut_short_by_redis_keeps_the_slots_and_its_token(worker: Any) -> None:
    runtime = worker.ctx["majordomus"]
    # The polls here are the test's own: the worker's loop (an idle one waits in a take of
    # its own) is stopped first.
    worker.main_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker.main_task
    worker._take_token = worker._block = None  # and its polls here take plainly
    free = worker.job_counter
    tokens: list[tuple[str, str | None]] = []

    async def away(
        worker_id: str, count: int, token: str, first: str | None = None, skip: Any = ()
    ) -> None:
        tokens.append((token, first))
        raise ConnectionError("Redis went away")

    runtime.store.take = away
    runtime.woken_by = "x-20261203T000000Z-0000000a"  # the wake-up the first send followed
    try:
        for _ in range(2):
            with pytest.raises(ConnectionError):
                await worker._poll_once()
            runtime.woken_by = "x-20261203T000000Z-0000000b"  # another, before the second
    finally:
        del runtime.store.take
    assert worker.job_counter == free
    # The next poll sends the lost take again, where it went first (its partitions, in the
    # same order): its answer, if it was carried out, comes back.
    assert len(tokens) == 2 and tokens[0] == tokens[1], tokens
    assert tokens[0][1] == "x-20261203T000000Z-0000000a"


@pytest.mark.usefixtures("spawns")
async def test_a_burst_of_starts_gets_one_score_each_and_a_take_reads_only_what_it_takes(
    private_engine: Engine,
) -> None:
    """Starts made together share a millisecond, so a place; the fraction of their score
    orders them as they were created, so a take serves the head of the queue in score
    order without reading the snapshots of the entries that would tie at its edge (it
    used to read every one of a place, some ten per take in a burst)."""
    engine, redis = private_engine, private_engine.redis
    ids = [s.id for s in await asyncio.gather(*(engine.start("tests.noop", {}) for _ in range(200)))]
    part = engine.store.keys.partitions[0]
    entries = await redis.zrange(part.queue, 0, -1, withscores=True)
    scores = [score for _, score in entries]
    assert len(set(scores)) == len(scores) == 200
    places = Counter(int(score) for score in scores)
    assert max(places.values()) > 1, "the burst never shared a millisecond: nothing shown"
    by_score = [m.decode() for m, _ in entries]
    orders = [int(f[0]) for f in await engine.store.snapshot_fields(by_score, ["order"])]
    assert orders == sorted(orders), "the queue's score order is not the order of creation"
    assert sorted(ids, key=by_score.index) == by_score
    await redis.config_resetstat()
    taken: list[str] = []
    takes = 0
    while len(taken) < 200:
        taken += [t.execution_id for t in (await take(engine, count=3)).taken]
        takes += 1
    assert taken == by_score
    stats = await redis.info("commandstats")
    # One snapshot read per execution taken (its state, capability, limit, order...), and
    # one look at the delayed set per take: no read of a tie at a batch's edge.
    assert stats["cmdstat_hmget"]["calls"] == 200
    assert stats["cmdstat_zrangebyscore"]["calls"] == takes
    # The claim's writes: two events and the snapshot per execution; the batch's index and
    # set updates (off the queue, off the queued index, onto the running index and the
    # worker's running set) and its worker-only inputs are one command each per take.
    assert stats["cmdstat_xadd"]["calls"] == 2 * 200
    assert stats["cmdstat_hset"]["calls"] == 200
    assert stats["cmdstat_zrem"]["calls"] == 2 * takes
    assert stats["cmdstat_zadd"]["calls"] == takes
    assert stats["cmdstat_sadd"]["calls"] == takes
    assert stats["cmdstat_mget"]["calls"] == takes


async def test_entries_that_share_a_score_are_still_taken_oldest_first(engine: Engine) -> None:
    """Entries moved into the queue on the millisecond (due delayed starts, freed slots)
    can share a score, which the sorted set orders by id: a batch ending among them still
    takes the oldest created."""
    ids = [(await engine.start("tests.noop", {})).id for _ in range(12)]
    queue = engine.store.keys.partitions[0].queue
    await engine.redis.zadd(queue, dict.fromkeys(ids, 1_000))  # one score, as if moved in
    assert await queue_of(engine) == sorted(ids) != ids  # by id, not as created
    taken: list[str] = []
    while len(taken) < 12:
        taken += [t.execution_id for t in (await take(engine, count=5)).taken]
    assert taken == ids
