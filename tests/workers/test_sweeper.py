"""The sweeper on a real Redis: one elected among every process, dead workers found by their
lease and their executions failed `unavailable` at a cost that does not grow with the
running executions of live workers, long-dead workers forgotten, retention pruned, and a
SIGKILLed worker's executions failed by the API with no worker left."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections import Counter
from typing import Any

import pytest
from redis.asyncio import Connection, Redis

import majordomus.sweeper as sweeper_module
from majordomus.api.app import create_app
from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.model import event_type_of
from majordomus.reports import worker_presence
from majordomus.store.executions import Store
from majordomus.store.workers import PRESENCE_SECONDS
from majordomus.sweeper import (
    LOCK_SWEEPS,
    SWEEP_MIN_SECONDS,
    SWEEPS_PER_LEASE,
    Sweeper,
    sweep_interval,
)
from tests.api.conftest import ApiProcess
from tests.conftest import (
    LIVENESS_SECONDS,
    make_settings,
    running_worker,
    until,
    wait_for_workers,
)


@pytest.fixture
def settings(redis_url: str) -> Settings:
    """A key prefix of these tests' own: the suite's long-lived API processes (tests/mcp's
    shared one) are sweeper candidates too, and would win elections meant for the test."""
    return make_settings(redis_url, key_prefix="md-sweeper-test")


SLEEPY = "tests.sleepy"


# -- arranging workers and their executions --------------------------------------------------


async def beat(store: Store, worker_id: str, *, ago_seconds: float = 0, lease: bool = True) -> None:
    """Present `worker_id` as a worker that last beat `ago_seconds` ago, holding its lease
    or (lease=False) with its lease run out."""
    _, ms = now_stamp()
    beat_ms = ms - int(ago_seconds * 1000)
    presence = {
        "id": worker_id,
        "host": "test",
        "pid": 1,
        "started_at": "",
        "running": 0,
        "last_beat": "",
        "last_beat_ms": beat_ms,
        "accepting": 1,
    }
    await store.beat(worker_id, presence, beat_ms, 60_000)
    if not lease:
        await store.redis.delete(store.keys.partitions[0].lease(worker_id))


async def running_on(engine: Engine, worker_id: str, count: int) -> list[str]:
    """`count` executions claimed by `worker_id`, as a worker's claim leaves them."""
    ids: list[str] = []
    for start in range(0, count, 500):
        batch = await asyncio.gather(
            *(engine.start(SLEEPY, {"seconds": 60}) for _ in range(min(500, count - start)))
        )
        ids += [s.id for s in batch]
    for start in range(0, count, 500):
        claims = await asyncio.gather(
            *(engine.store.claim(i, worker_id) for i in ids[start : start + 500])
        )
        assert all(claim.complete for claim, _ in claims)
    return ids


async def held(store: Store, worker_id: str) -> set[str]:
    return {m.decode() for m in await store.redis.smembers(store.keys.partitions[0].worker_running(worker_id))}


async def states(engine: Engine, ids: list[str]) -> Counter[str]:
    return Counter(s or "gone" for s in await engine.store.states(ids))


# -- election -------------------------------------------------------------------------------


async def test_only_one_candidate_of_many_sweeps_at_a_time(
    engine: Engine, settings: Settings
) -> None:
    candidates = [Sweeper(engine.store, settings, f"test:{n}") for n in range(5)]
    holders = set()
    for _ in range(3):
        answers = await asyncio.gather(*(c.tick() for c in candidates))
        assert sum(a is not None for a in answers) == 1
        holders |= {c.holder for c in candidates if c.holding}
    assert len(holders) == 1  # and the holder keeps it
    holder = next(c for c in candidates if c.holding)
    assert await engine.store.sweeper_lock_holder() == holder.holder
    lock_ms = await engine.redis.pttl(engine.store.keys.sweeper_lock)
    assert 0 < lock_ms <= sweep_interval(settings) * LOCK_SWEEPS * 1000


async def test_a_stopped_sweeper_releases_the_lock_and_another_takes_it(
    engine: Engine, settings: Settings
) -> None:
    first = Sweeper(engine.store, settings, "test:first")
    second = Sweeper(engine.store, settings, "test:second")
    first.start()
    await until(lambda: _holder_is(engine, first))
    assert await second.tick() is None
    await first.stop()
    assert await engine.store.sweeper_lock_holder() is None
    assert await second.tick() == 0 and second.holding


async def test_a_holder_that_dies_loses_the_lock_after_its_time(
    engine: Engine, redis_url: str
) -> None:
    # The shortest lock there is (the sweeps' floor): 1 s.
    settings = make_settings(redis_url, lease_seconds=SWEEP_MIN_SECONDS * SWEEPS_PER_LEASE)
    dead = Sweeper(engine.store, settings, "test:dead")
    heir = Sweeper(engine.store, settings, "test:heir")
    assert await dead.tick() == 0  # then never again, and never released
    # Held for its time, no longer: Redis ends it then (the key's own expiry).
    assert await engine.store.sweeper_lock_holder() == dead.holder
    assert 0 < await engine.redis.pttl(engine.store.keys.sweeper_lock) <= dead.lock_ms
    assert await heir.tick() is None  # not before its time

    async def heir_took_it() -> bool:
        return await heir.tick() is not None

    await until(heir_took_it, timeout=LIVENESS_SECONDS, interval=0.05)
    assert await engine.store.sweeper_lock_holder() == heir.holder
    assert await dead.tick() is None  # it cannot take it back while the heir renews it


async def test_a_process_says_once_when_it_becomes_the_sweeper_and_when_it_stops_being_it(
    engine: Engine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    dead = Sweeper(engine.store, settings, "test:dead")
    heir = Sweeper(engine.store, settings, "test:heir")
    caplog.set_level(logging.INFO, logger="majordomus.sweeper")
    assert await dead.tick() == 0 and await dead.tick() == 0  # taken, then renewed
    await engine.redis.delete(engine.store.keys.sweeper_lock)  # as if it lapsed
    assert await heir.tick() == 0
    assert await dead.tick() is None
    lines = [r.getMessage() for r in caplog.records if r.name == "majordomus.sweeper"]
    assert lines == [
        f"{dead.holder} is the sweeper now",
        f"{heir.holder} is the sweeper now",
        f"{dead.holder} is no longer the sweeper (its lock lapsed or was taken)",
    ]


async def test_the_api_takes_over_from_a_worker_that_stops_and_releases_on_shutdown(
    redis: Any, engine: Engine, settings: Settings
) -> None:
    app = create_app(settings, engine, mount_mcp=False)
    async with running_worker(redis, settings) as worker:
        worker_id = worker.ctx["majordomus"].worker_id
        assert await until(lambda: _held_by_prefix(engine, f"worker:{worker_id}:"))
        async with app.lifespan():  # as the server runs it
            await asyncio.sleep(sweep_interval(settings) * 2)
            assert not app.state.sweeper.holding  # a candidate, not the sweeper
            await worker.ctx["majordomus"].stop()  # a clean stop releases the lock
            await until(
                lambda: _held_by_prefix(engine, "api:"), timeout=sweep_interval(settings) * 3
            )
        assert await engine.store.sweeper_lock_holder() is None


# -- dead workers -----------------------------------------------------------------------------


async def test_a_dead_workers_executions_fail_unavailable_and_a_live_ones_run_on(
    engine: Engine, settings: Settings
) -> None:
    store = engine.store
    await beat(store, "alive")
    await beat(store, "dead", ago_seconds=5, lease=False)
    alive = await running_on(engine, "alive", 3)
    lost = await running_on(engine, "dead", 4)
    await engine.cancel(lost[0])  # cancelling is held too: it fails as well
    sweeper = Sweeper(store, settings, "test")
    assert await sweeper.tick() == 4
    for execution_id in lost:
        snap = await engine.get(execution_id)
        assert snap.state == "failed"
        assert snap.error.code == "unavailable"  # type: ignore[union-attr]
        assert snap.error.message == "the worker running it stopped"  # type: ignore[union-attr]
    assert await states(engine, alive) == {"running": 3}
    assert await held(store, "dead") == set()
    assert not await store.redis.exists(store.keys.partitions[0].worker_running("dead"))
    assert await held(store, "alive") == set(alive)
    # Still shown, as silent, for a while.
    shown = {w.id: w.silent for w in await worker_presence(engine)}
    assert shown == {"alive": False, "dead": True}
    assert await sweeper.tick() == 0  # nothing is failed twice


async def test_two_sweepers_racing_fail_an_execution_once(
    engine: Engine, settings: Settings
) -> None:
    await beat(engine.store, "dead", lease=False)
    lost = await running_on(engine, "dead", 40)
    a, b = Sweeper(engine.store, settings, "a"), Sweeper(engine.store, settings, "b")
    assert sum(await asyncio.gather(a.sweep(), b.sweep())) == 40
    for execution_id in lost:
        events = (await engine.events(execution_id)).events
        assert [event_type_of(e) for e in events].count("execution.failed") == 1


async def test_an_execution_that_ended_or_vanished_is_let_go_not_failed(
    engine: Engine, settings: Settings
) -> None:
    store = engine.store
    await beat(store, "dead", lease=False)
    done, gone = await running_on(engine, "dead", 2)
    await store.append(done, [("execution.completed", b'{"output":{"seconds":0}}')])
    await store.redis.delete(*store.keys.execution_keys(gone))
    # Whatever the scripts did, the set may still name them: the sweep must not choke.
    await store.redis.sadd(store.keys.partitions[0].worker_running("dead"), done, gone)
    assert await Sweeper(store, settings, "test").tick() == 0
    assert (await engine.get(done)).state == "succeeded"
    assert await held(store, "dead") == set()


async def test_a_worker_that_renews_its_lease_while_being_swept_keeps_its_executions(
    engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back from an outage, a worker beats between the sweeper's look at the leases and its
    failures: the failures are refused in the same atomic step (the lease is checked there),
    and the worker keeps every execution, still in its running set."""
    store = engine.store
    await beat(store, "back", lease=False)
    ids = await running_on(engine, "back", 30)
    looked = store.held_by

    async def then_it_beats(worker_ids: list[str]) -> list[list[str]]:
        found = await looked(worker_ids)
        await beat(store, "back")
        return found

    monkeypatch.setattr(store, "held_by", then_it_beats)
    sweeper = Sweeper(store, settings, "test")
    assert await sweeper.tick() == 0
    assert await states(engine, ids) == Counter({"running": 30})
    assert await held(store, "back") == set(ids)
    monkeypatch.undo()
    await store.redis.delete(store.keys.partitions[0].lease("back"))  # and once it does lapse, they fail
    assert await sweeper.tick() == 30


async def test_a_worker_back_from_an_outage_renews_its_lease_before_it_takes_work(
    redis: Any, engine: Engine, settings: Settings
) -> None:
    async with running_worker(redis, settings) as worker:
        runtime = worker.runtime
        lease_key = engine.store.keys.partitions[0].lease(runtime.worker_id)
        take = runtime.store.take
        lease_at_take: list[bool] = []

        async def taking(*args: Any, **kwargs: Any) -> Any:
            lease_at_take.append(bool(await redis.exists(lease_key)))
            return await take(*args, **kwargs)

        runtime.store.take = taking  # type: ignore[method-assign]
        # As after an outage longer than the lease: no beat for a while, the lease gone.
        runtime.beat_ok_at = time.monotonic() - settings.lease_seconds
        await redis.delete(lease_key)
        snap = await engine.start("tests.noop", {})
        assert (await engine.wait(snap.id, 10_000)).state == "succeeded"
    assert lease_at_take and all(lease_at_take), lease_at_take


async def test_a_worker_dead_longer_than_the_presence_time_is_forgotten(
    engine: Engine, settings: Settings
) -> None:
    store = engine.store
    await beat(store, "long-dead", ago_seconds=PRESENCE_SECONDS + 5, lease=False)
    await beat(store, "lately-dead", ago_seconds=600, lease=False)
    await beat(store, "alive")
    await Sweeper(store, settings, "test").tick()
    assert [w.id for w in await store.worker_leases()] == ["lately-dead", "alive"]
    assert not await store.redis.exists(store.keys.worker("long-dead"))
    assert await store.redis.exists(store.keys.worker("lately-dead"))


async def test_a_worker_stopping_with_executions_it_could_not_end_is_left_to_the_sweeper(
    engine: Engine, settings: Settings
) -> None:
    store = engine.store
    await beat(store, "stopping")
    stuck = await running_on(engine, "stopping", 2)
    await store.remove_worker("stopping")
    assert await Sweeper(store, settings, "test").tick() == 2
    assert await states(engine, stuck) == {"failed": 2}
    await beat(store, "clean")
    await store.remove_worker("clean")
    assert "clean" not in {w.id for w in await store.worker_leases()}


# -- cost -----------------------------------------------------------------------------------


SENT: Counter[str] = Counter()


class CountingConnection(Connection):
    """A connection that counts every command it sends, pipelined or not (a pipeline packs
    each of its commands with `pack_command` too)."""

    def pack_command(self, *args: Any) -> Any:
        SENT[str(args[0]).upper()] += 1
        return super().pack_command(*args)


async def commands_of_a_pass(sweeper: Sweeper) -> Counter[str]:
    await sweeper.tick()  # warm: the lock taken, connections open, the first prune done
    SENT.clear()
    assert await sweeper.tick() == 0
    return Counter(SENT)


@pytest.mark.slow
async def test_a_pass_costs_the_same_with_10_or_10_000_running_executions(
    redis_url: str, engine: Engine, settings: Settings
) -> None:
    client = Redis.from_url(redis_url, connection_class=CountingConnection)
    try:
        store = Store(client, settings)
        await beat(engine.store, "busy")
        await beat(engine.store, "idle")
        await beat(engine.store, "dead", ago_seconds=60, lease=False)
        sweeper = Sweeper(store, settings, "test")
        await running_on(engine, "busy", 10)
        few = await commands_of_a_pass(sweeper)
        await running_on(engine, "busy", 9_990)
        assert await engine.store.counts() == (0, 10_000)
        many = await commands_of_a_pass(sweeper)
    finally:
        await client.aclose()
    assert many == few
    # The renewal (one script: the check and the extension), the workers' set and, per
    # worker, its lease and its running count, and the queue's upkeep (one script per
    # capability with a max_concurrency; none here): nothing per execution.
    workers = 3
    assert few == Counter(EVALSHA=1, ZRANGE=1, EXISTS=workers, SCARD=workers), few


async def test_a_candidate_that_is_not_elected_costs_one_command_a_try(
    redis_url: str, engine: Engine, settings: Settings
) -> None:
    await Sweeper(engine.store, settings, "holder").tick()
    client = Redis.from_url(redis_url, connection_class=CountingConnection)
    try:
        candidate = Sweeper(Store(client, settings), settings, "candidate")
        assert await candidate.tick() is None
        SENT.clear()
        assert await candidate.tick() is None
    finally:
        await client.aclose()
    assert SENT == Counter(SET=1)


# -- retention --------------------------------------------------------------------------------


async def test_the_holder_prunes_retention_about_once_a_minute(
    redis_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_settings(redis_url, retain_executions=1, key_prefix=engine.settings.key_prefix)
    store = Store(engine.redis, cfg)

    async def finish(n: int) -> None:
        for execution_id in await running_on(engine, "w", n):
            await store.append(execution_id, [("execution.completed", b'{"output":{"seconds":0}}')])

    await beat(store, "w")
    await finish(3)
    sweeper = Sweeper(store, cfg, "test")
    await sweeper.tick()
    assert await engine.redis.zcard(store.keys.partitions[0].finished) == 1
    await finish(2)
    await sweeper.tick()  # pruned less than a minute ago
    assert await engine.redis.zcard(store.keys.partitions[0].finished) == 3
    monkeypatch.setattr(sweeper_module, "PRUNE_EVERY_SECONDS", 0.0)
    await sweeper.tick()
    assert await engine.redis.zcard(store.keys.partitions[0].finished) == 1
    assert await Sweeper(store, cfg, "not elected").tick() is None


# -- failures -----------------------------------------------------------------------------------


class FailingStore(Store):
    async def hold_sweeper_lock(self, holder: str, ttl_ms: int, *, renew: bool = False) -> bool:
        raise RuntimeError("the lock is broken")


async def test_a_failing_sweep_is_said_once_with_its_traceback_then_counted(
    redis: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    sweeper = Sweeper(FailingStore(redis, settings), settings, "test")
    with caplog.at_level(logging.INFO, logger="majordomus.sweeper"):
        sweeper.start()
        await until(lambda: _failed_times(sweeper, 3), timeout=5)
        await sweeper.stop()
    said = [r for r in caplog.records if r.name == "majordomus.sweeper"]
    assert len(said) == 1 and said[0].exc_info is not None
    assert "the lock is broken" in said[0].getMessage()


class BusyStore(Store):
    """A store whose pass spends its time in Redis commands, where a cancel lands."""

    async def worker_leases(self) -> Any:
        for _ in range(20):
            await self.sweeper_lock_holder()
        return await super().worker_leases()


async def test_cancelling_the_sweeper_is_never_swallowed(
    engine: Engine, settings: Settings
) -> None:
    store = BusyStore(engine.redis, settings)
    for _ in range(40):
        sweeper = Sweeper(store, settings, "test")
        task = asyncio.create_task(sweeper.run())
        await asyncio.sleep(random.uniform(0.001, 0.01))  # mostly mid-command
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 3)
        assert task.cancelled()
        assert await engine.store.sweeper_lock_holder() is None  # released on the way out


# -- end to end -----------------------------------------------------------------------------------


async def test_with_the_only_worker_killed_the_api_fails_its_100_executions_in_time(
    redis: Any, redis_url: str, engine: Engine, worker_process: Any
) -> None:
    lease = 3.0
    prefix = engine.settings.key_prefix
    doomed = worker_process(MAJORDOMUS_MAX_JOBS="100", MAJORDOMUS_KEY_PREFIX=prefix)
    await wait_for_workers(redis, 1, key=engine.store.keys.workers)
    # The worker is the sweeper; the API has to take over from a holder that died.
    await until(lambda: _held_by_prefix(engine, "worker:"), timeout=10)
    api = ApiProcess(redis_url, MAJORDOMUS_KEY_PREFIX=prefix).start()
    try:
        ids = [(await engine.start(SLEEPY, {"seconds": 120})).id for _ in range(100)]
        await until(lambda: _all_running(engine, ids), timeout=30)
        killed_at = time.monotonic()
        doomed.kill(signal.SIGKILL)
        doomed.wait()
        # Ended by the lease the worker stopped renewing (said below), long before the 120 s
        # sleeps would have.
        await until(lambda: _none_running(engine, ids), timeout=LIVENESS_SECONDS, interval=0.05)
        print(f"the 100 failed {time.monotonic() - killed_at:.1f} s after the kill (lease {lease} s)")
        assert await engine.store.workers_beating(int(time.time() * 1000) - 1000) == []
        for snap in [await engine.get(i) for i in ids]:
            assert snap.state == "failed" and snap.error.code == "unavailable", snap  # type: ignore[union-attr]
        assert (await engine.store.sweeper_lock_holder() or "").startswith("api:")
    finally:
        output = api.output()
        api.close()
    assert "stopped renewing its lease: failed the 100 executions" in output, output[-3000:]


# -- helpers --------------------------------------------------------------------------------------


async def _holder_is(engine: Engine, sweeper: Sweeper) -> bool:
    return await engine.store.sweeper_lock_holder() == sweeper.holder


async def _held_by_prefix(engine: Engine, prefix: str) -> bool:
    return (await engine.store.sweeper_lock_holder() or "").startswith(prefix)


async def _all_running(engine: Engine, ids: list[str]) -> bool:
    return await states(engine, ids) == {"running": len(ids)}


async def _none_running(engine: Engine, ids: list[str]) -> bool:
    return "running" not in await states(engine, ids)


async def _failed_times(sweeper: Sweeper, n: int) -> bool:
    return sweeper.failures.count >= n
