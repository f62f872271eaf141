"""Partitions (`majordomus.store.keys`): every script's keys in one hash slot, the
partitions spread over the slot ranges, and the executions of a deployment of three
partitions on one Redis run, list, cap and dedupe as they do on one.

The slot rule is checked on every script call the store makes (a spy on the scripts'
`KEYS`), through the whole life of executions: start, take, reports, cancel, a capped
capability's slots, an idempotency key, a delayed start; the cluster itself runs them in
`tests/cluster`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.ids import new_execution_id
from majordomus.registry import REGISTRY
from majordomus.start_options import StartOptions
from majordomus.store.keys import SLOTS, Keys, partition_tag, slot_of
from tests.conftest import make_settings, running_worker, until

PARTITIONS = 3


def test_a_partitions_keys_share_one_slot_in_its_own_range_of_slots() -> None:
    keys = Keys("md", PARTITIONS)
    for part in keys.partitions:
        names = [
            part.queue,
            part.delayed,
            part.all,
            part.created_counter,
            part.queued,
            part.running,
            part.finished,
            part.feed,
            part.snapshot("x-1"),
            part.lease("w"),
            part.worker_running("w"),
            part.worker_take("w"),
            part.concurrency("c"),
            part.waiting("c"),
            part.idempotency("k"),
        ]
        assert {slot_of(name) for name in names} == {slot_of(part.tag)}
        assert slot_of(part.tag) * PARTITIONS // SLOTS == part.index
    assert partition_tag("md", 0, 1) == "{md/0/0}"
    # Episodes and schedules keep to one slot each, whatever the partitions.
    episode = {slot_of(k) for k in (keys.episode("a"), keys.episode_lease("a"), keys.episodes)}
    assert len(episode | {slot_of(keys.episodes_closed), slot_of(keys.episode_closed("a", 1))}) == 1
    assert len({slot_of(keys.schedule("s")), slot_of(keys.schedules), slot_of(keys.schedules_version)}) == 1


def test_an_id_made_for_a_partition_lands_in_it_and_its_keys_follow() -> None:
    keys = Keys("md", PARTITIONS)
    for index in range(PARTITIONS):
        for _ in range(200):
            made = new_execution_id(partition=index, partitions=PARTITIONS)
            part = keys.partition_of(made)
            assert part.index == index
            assert {slot_of(k) for k in (*keys.execution_keys(made), keys.task(made))} == {
                slot_of(part.tag)
            }
    spread = {keys.partition_of(new_execution_id()).index for _ in range(200)}
    assert spread == set(range(PARTITIONS))
    # A retry's key is its retried attempt's partition; a capability's cap has one.
    failed = new_execution_id(partition=2, partitions=PARTITIONS)
    assert keys.partition_of_key(f"retry:{failed}").index == 2
    assert keys.partition_of_capability("tests.serial") is keys.partition_of_capability(
        "tests.serial"
    )


class SlotSpy:
    """Every script call's `KEYS`, to check they share one slot (a Redis Cluster routes a
    script by them and refuses keys of several slots, an empty one included)."""

    def __init__(self, redis: Any) -> None:
        self.calls: list[list[str]] = []
        self.original = redis.evalsha

        async def evalsha(sha: str, numkeys: int, *keys_and_args: Any) -> Any:
            named = [k.decode() if isinstance(k, bytes) else str(k) for k in keys_and_args[:numkeys]]
            self.calls.append(named)
            return await self.original(sha, numkeys, *keys_and_args)

        redis.evalsha = evalsha

    def crossing(self) -> list[list[str]]:
        return [keys for keys in self.calls if len({slot_of(k) for k in keys}) > 1]


@pytest.fixture
async def parted(redis: Any, redis_url: str) -> AsyncIterator[tuple[Engine, SlotSpy]]:
    spy = SlotSpy(redis)
    settings = make_settings(redis_url, partitions=PARTITIONS)
    yield Engine(redis, REGISTRY, settings), spy
    redis.evalsha = spy.original


async def test_three_partitions_on_one_redis_run_list_cap_and_dedupe_in_one_slot_a_script(
    redis: Any, parted: tuple[Engine, SlotSpy]
) -> None:
    engine, spy = parted
    keys = engine.store.keys
    async with running_worker(redis, engine.settings):
        started = [await engine.start("tests.noop", {}) for _ in range(30)]
        # Spread over every partition, each found in its own.
        assert {keys.partition_of(s.id).index for s in started} == set(range(PARTITIONS))
        for snap in started:
            done = await engine.wait(snap.id, timeout_ms=20_000)
            assert done.state == "succeeded", done
        # The list merges the partitions' newest, every one of them, newest first.
        listed = await engine.store.ids_newest_first(100)
        assert {i for i, _ in listed} == {s.id for s in started}
        places = [place for _, place in listed]
        assert places == sorted(places, reverse=True)
        page = await engine.store.ids_newest_first(10, older_than=places[9])
        assert [i for i, _ in page] == [i for i, _ in listed[10:20]]
        assert await engine.store.finished_count() == 30

        # A capped capability's executions live in its one partition, one at a time.
        home = keys.partition_of_capability("tests.serial")
        serial = [await engine.start("tests.serial", {"seconds": 0.05}) for _ in range(3)]
        assert {keys.partition_of(s.id) for s in serial} == {home}
        ends = [await engine.wait(s.id, timeout_ms=20_000) for s in serial]
        assert [e.state for e in ends] == ["succeeded"] * 3
        spans = sorted((e.started_at, e.finished_at) for e in ends)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans  # never two at once

        # One idempotency key, one execution, from whichever partition it is asked.
        first = await engine.start("tests.noop", {}, options=StartOptions(idempotency_key="k-1"))
        again = await engine.start("tests.noop", {}, options=StartOptions(idempotency_key="k-1"))
        assert again.id == first.id
        assert keys.partition_of(first.id) is keys.partition_of_key("k-1")

        # Cancel and a delayed start, wherever they land.
        long = await engine.start("tests.sleepy", {"seconds": 30})
        await until(lambda: _state(engine, long.id, "running"), timeout=20)
        await engine.cancel(long.id, by="test")
        assert (await engine.wait(long.id, timeout_ms=20_000)).state == "cancelled"
        later = await engine.start(
            "tests.noop", {}, options=StartOptions(start_at_ms=_now_ms() + 300)
        )
        assert (await engine.wait(later.id, timeout_ms=20_000)).state == "succeeded"
        queued, running = await engine.store.counts()
        assert (queued, running) == (0, 0)
    assert spy.calls and spy.crossing() == []


async def test_a_dead_workers_executions_are_found_in_every_partition(
    redis: Any, parted: tuple[Engine, SlotSpy]
) -> None:
    engine, spy = parted
    store = engine.store
    ids = [new_execution_id(partition=i, partitions=PARTITIONS) for i in range(PARTITIONS)]
    await store.beat("dead", {"id": "dead"}, _now_ms(), 60_000)
    for execution_id in ids:
        await redis.sadd(store.keys.partition_of(execution_id).worker_running("dead"), execution_id)
    [lease] = await store.worker_leases()
    assert (lease.id, lease.lease_held, lease.holds) == ("dead", True, PARTITIONS)
    assert await store.held_by(["dead"]) == [sorted(ids)]
    await redis.delete(store.keys.partitions[1].lease("dead"))  # lapsed in one: not held
    [lease] = await store.worker_leases()
    assert not lease.lease_held
    await store.let_go("dead", ids[:2])
    assert await store.held_by(["dead"]) == [ids[2:]]
    await store.forget_workers(["dead"])
    assert await store.worker_leases() == []
    assert not await redis.keys(f"{store.keys.prefix}:*worker:dead*")
    assert spy.crossing() == []


async def _state(engine: Engine, execution_id: str, state: str) -> bool:
    return (await engine.get(execution_id)).state == state


def _now_ms() -> int:
    return int(time.time() * 1000)


async def test_a_take_woken_by_a_start_visits_its_partition_alone_then_says_look_again(
    redis: Any, parted: tuple[Engine, SlotSpy]
) -> None:
    engine, spy = parted
    store, keys = engine.store, engine.store.keys
    for part in keys.partitions:  # a worker whose lease holds, in every partition
        await redis.set(part.lease("w"), 1, px=60_000)
    started = [await engine.start("tests.noop", {}) for _ in range(12)]
    woken = started[-1]
    home = keys.partition_of(woken.id)
    before = len(spy.calls)
    take = await store.take("w", 1, store.next_token(), first=woken.id)
    assert len(spy.calls) - before == 1, "one trip, to the woken execution's partition"
    [one] = take.taken
    assert keys.partition_of(one.execution_id) is home
    # The room it did not fill: take again at once, from every partition in turn.
    take = await store.take("w", 20, store.next_token(), first=woken.id)
    assert take.next_due_ms is not None and take.next_due_ms <= time.time() * 1000
    rest = await store.take("w", 20, store.next_token())
    assert {t.execution_id for t in (one, *take.taken, *rest.taken)} == {s.id for s in started}
    # A wake that names no execution (an older release's) takes as a plain poll.
    assert (await store.take("w", 5, store.next_token(), first="slot")).taken == []
    assert spy.crossing() == []
