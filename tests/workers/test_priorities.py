"""Priorities: a start may carry `low`, `normal` or `high` (its capability's by default).
Higher levels are taken first across every worker, each level first come first served,
`queued{ahead}` counts what will really be taken first, and a `low` execution is never
starved: after twice `MAJORDOMUS_PRIORITY_AGING_SECONDS` it is ahead of newer `high` work."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.start_options import StartOptions
from tests.conftest import make_settings, running_worker, until
from tests.workers.test_take_job import take

HIGH = StartOptions(priority="high")
LOW = StartOptions(priority="low")


async def _started_ms(engine: Engine, ids: list[str]) -> list[int]:
    fields = await engine.store.snapshot_fields(ids, ["started_ms"])
    return [int(f[0]) for f in fields if f[0] is not None]


async def test_high_starts_go_before_the_low_ones_waiting_for_a_busy_worker(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, max_jobs=1)
    engine = Engine(redis, REGISTRY, cfg)
    async with running_worker(redis, cfg):
        busy = await engine.start("tests.sleepy", {"seconds": 60})  # until cancelled below
        await until(lambda: _state_is(engine, busy.id, "running"))
        lows = [(await engine.start("tests.noop", {}, options=LOW)).id for _ in range(200)]
        highs = [await engine.start("tests.noop", {}, options=HIGH) for _ in range(20)]
        # What is really ahead of each high one: the high ones before it, no low one.
        assert [h.priority for h in highs] == ["high"] * 20
        queued = [(await engine.events(h.id, 1, 1)).events[0] for h in highs]
        assert [q.data.ahead for q in queued] == list(range(20))  # type: ignore[union-attr]
        ids = [h.id for h in highs] + lows
        await engine.cancel(busy.id)  # the slot frees once all of them wait

        async def all_done() -> bool:
            return all(s == "succeeded" for s in await engine.store.states(ids))

        assert await until(all_done, timeout=30)
    high_started = await _started_ms(engine, [h.id for h in highs])
    low_started = await _started_ms(engine, lows)
    assert max(high_started) <= min(low_started)
    # First come first served within each level.
    assert high_started == sorted(high_started)
    assert low_started == sorted(low_started)
    # Every one started no earlier than the one before it in line (two may share a
    # millisecond: a one-slot worker starts the next in the one it ended the last).
    started = await _started_ms(engine, ids)
    assert started == sorted(started)


async def _state_is(engine: Engine, execution_id: str, state: str) -> bool:
    return (await engine.get(execution_id)).state == state


async def test_a_start_takes_its_capabilitys_priority_unless_it_names_one(
    engine: Engine,
) -> None:
    plain = await engine.start("tests.noop", {})
    assert plain.priority == "normal"
    assert (await engine.get(plain.id)).priority == "normal"
    named = await engine.invoke(
        "executions.start", {"capability": "tests.noop", "priority": "high"}
    )
    assert (await engine.get(named.id)).priority == "high"
    took = await take(engine, count=2)
    assert [t.execution_id for t in took.taken] == [named.id, plain.id]


async def test_a_low_execution_is_not_starved_by_newer_high_ones(redis: Any, redis_url: str) -> None:
    engine = Engine(redis, REGISTRY, make_settings(redis_url, priority_aging_seconds=0.1))
    fresh_low = await engine.start("tests.noop", {}, options=LOW)
    fresh_high = await engine.start("tests.noop", {}, options=HIGH)
    took = await take(engine, count=1)
    assert [t.execution_id for t in took.taken] == [fresh_high.id]  # new: high first
    await asyncio.sleep(0.25)  # the low one has waited over twice the aging period
    newer_high = await engine.start("tests.noop", {}, options=HIGH)
    took = await take(engine, count=2)
    assert [t.execution_id for t in took.taken] == [fresh_low.id, newer_high.id]


async def test_an_unknown_priority_is_refused_by_shape(engine: Engine) -> None:
    from majordomus.errors import MajordomusError

    try:
        await engine.invoke("executions.start", {"capability": "tests.noop", "priority": "urgent"})
    except MajordomusError as exc:
        assert exc.code == "invalid_input"
        assert "priority" in exc.message
    else:
        raise AssertionError("an unknown priority was accepted")
    assert await engine.redis.zcard(engine.store.keys.partitions[0].queue) == 0


async def test_entries_of_one_place_are_taken_in_the_order_they_were_created(
    redis: Any, redis_url: str
) -> None:
    """Without aging every level stands where it came (one head start, one rank), so a
    burst mixing the levels is served as it was created; with aging, a place is shared
    only by entries of different levels created apart, served oldest first."""
    levels = [HIGH, LOW, StartOptions(priority="normal")]
    flat = Engine(redis, REGISTRY, make_settings(redis_url, priority_aging_seconds=0.0))
    ids = [
        s.id
        for s in await asyncio.gather(
            *(flat.start("tests.noop", {}, options=levels[i % 3]) for i in range(60))
        )
    ]
    order = [int(f[0]) for f in await flat.store.snapshot_fields(ids, ["order"])]
    created = [i for _, i in sorted(zip(order, ids, strict=True))]
    taken: list[str] = []
    while len(taken) < 60:
        taken += [t.execution_id for t in (await take(flat, count=4)).taken]
    assert taken == created
    # Aging of 4 ms: a low entry created at t and a high one created at t + 8 ms share a
    # place; the low one, created first, is taken first, whatever their ids.
    aged = Engine(redis, REGISTRY, make_settings(redis_url, priority_aging_seconds=0.004))
    part = aged.store.keys.partitions[0]
    pairs: list[tuple[str, str]] = []
    shared: list[tuple[str, str]] = []
    for _ in range(200):  # until a few pairs landed 8 ms apart by Redis' clock
        low = await aged.start("tests.noop", {}, options=LOW)
        [[raw]] = await aged.store.snapshot_fields([low.id], ["order"])
        low_ms = int(raw or 0) // 1024
        while time.time() * 1000 < low_ms + 8:  # the same machine's clock as Redis'
            await asyncio.sleep(0.0005)
        high = await aged.start("tests.noop", {}, options=HIGH)
        pairs.append((low.id, high.id))
        lo_score = await redis.zscore(part.queue, low.id)
        hi_score = await redis.zscore(part.queue, high.id)
        if int(lo_score) == int(hi_score):
            shared.append((low.id, high.id))
            assert lo_score < hi_score
            if len(shared) == 3:
                break
    assert shared, "no low and high entry shared a place: nothing shown"
    taken = []
    while len(taken) < 2 * len(pairs):
        taken += [t.execution_id for t in (await take(aged, count=40)).taken]
    assert all(taken.index(lo) < taken.index(hi) for lo, hi in shared)
