"""Two deployments with different `MAJORDOMUS_KEY_PREFIX`es share a Redis database and
nothing else: every key either writes, arq's queue and health record included, starts with
its prefix, and each runs only its own executions, through success, cancel, a worker killed
mid-run and one that died right after a take. Both run in this one process (as the
tests and `majordomus dev` do), beside a worker process of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.registry import REGISTRY
from tests.conftest import make_settings, running_worker, until, wait_for_workers
from tests.workers.test_sweeper import beat

PREFIXES = ("t1", "t2")


@pytest.fixture
async def engines(redis: Any, redis_url: str) -> AsyncIterator[dict[str, Engine]]:
    yield {p: Engine(redis, REGISTRY, make_settings(redis_url, key_prefix=p)) for p in PREFIXES}


async def all_keys(redis: Any) -> list[str]:
    return sorted([k.decode() async for k in redis.scan_iter(count=1000)])


def strays(keys: list[str]) -> list[str]:
    return [k for k in keys if not k.startswith(tuple(f"{p}:" for p in PREFIXES))]


async def _state(engine: Engine, execution_id: str, state: str) -> bool:
    return (await engine.get(execution_id)).state == state


async def _one_worker(engine: Engine) -> str:
    leases = await engine.store.worker_leases()
    return leases[0].id if leases else ""


async def test_two_prefixes_on_one_database_share_no_key_and_run_only_their_own(
    redis: Any, redis_url: str, engines: dict[str, Engine], worker_process: Any
) -> None:
    t1, t2 = engines["t1"], engines["t2"]

    # A t2 worker process takes a long execution, and is killed while it runs it.
    victim = worker_process(MAJORDOMUS_KEY_PREFIX="t2")
    await wait_for_workers(redis, 1, key=t2.store.keys.workers)
    victim_id = await _one_worker(t2)
    lost = await t2.start("tests.sleepy", {"seconds": 60})
    await until(lambda: _state(t2, lost.id, "running"), timeout=20)
    in_flight = await all_keys(redis)
    assert strays(in_flight) == []
    # The execution's keys, under the prefix and its partition's hash tag.
    assert {t2.store.keys.snapshot(lost.id), t2.store.keys.events(lost.id)} <= set(in_flight)
    assert t2.store.keys.snapshot(lost.id).startswith("t2:{t2/")
    victim.kill()
    victim.wait()

    # A t1 execution taken by a worker that died right after the take (its lease lapses).
    stranded = await t1.start("tests.noop", {})
    await beat(t1.store, "ghost")
    assert [t.execution_id for t in (await _take(t1, "ghost")).taken] == [stranded.id]
    await redis.pexpire(t1.store.keys.partitions[0].lease("ghost"), 1)

    async with running_worker(redis, t1.settings) as w1, running_worker(redis, t2.settings) as w2:
        ids = {p: w.runtime.worker_id for p, w in (("t1", w1), ("t2", w2))}
        done = {
            p: [(await e.start("tests.noop", {})).id for _ in range(5)] for p, e in engines.items()
        }
        cancelled = await t1.start("tests.sleepy", {"seconds": 60})
        await until(lambda: _state(t1, cancelled.id, "running"))
        assert strays(await all_keys(redis)) == []
        await t1.cancel(cancelled.id)

        for prefix, engine in engines.items():
            for xid in done[prefix]:
                snap = await engine.wait(xid, 20_000)
                assert (snap.state, snap.worker) == ("succeeded", ids[prefix])
                other = engines["t2" if prefix == "t1" else "t1"]
                with pytest.raises(MajordomusError):
                    await other.get(xid)
        assert (await t1.wait(cancelled.id, 20_000)).state == "cancelled"
        # The t1 sweeper failed what the dead taker held; nothing ran it twice.
        gone = await t1.wait(stranded.id, 30_000)
        assert (gone.state, gone.worker, gone.attempt) == ("failed", "ghost", 1)
        # The t2 sweeper failed what the killed t2 worker held.
        failed = await t2.wait(lost.id, 30_000)
        assert (failed.state, failed.worker) == ("failed", victim_id)
        assert strays(await all_keys(redis)) == []

    left = await all_keys(redis)
    assert left and strays(left) == []
    # Of the ended executions only their snapshots and histories are left.
    kept = [k for k in left if ":x:" in k]
    assert kept and all(k.startswith(("t1:{t1/", "t2:{t2/")) for k in kept), kept
    assert all(k.count(":x:x-") == 1 and not k.endswith(":input") for k in kept), kept


async def _take(engine: Engine, worker: str) -> Any:
    return await engine.store.take(worker, 10, engine.store.next_token())


async def test_a_worker_under_arqs_own_worker_class_refuses_to_start(settings: Settings) -> None:
    """`arq workers.settings.WorkerSettings` builds arq's `Worker`, which would name the
    jobs' keys arq:job:<id>: the startup says so instead of leaving executions queued."""
    from majordomus.workers.settings import startup

    with pytest.raises(RuntimeError, match="MajordomusWorker"):
        await startup({"settings": settings})


async def test_a_worker_torn_down_mid_run_leaves_its_end_to_the_sweeper(
    redis: Any, engines: dict[str, Engine]
) -> None:
    t1 = engines["t1"]
    async with running_worker(redis, t1.settings) as worker:
        snap = await t1.start("tests.sleepy", {"seconds": 60})
        await until(lambda: _state(t1, snap.id, "running"))
        keys = t1.store.keys
    assert worker.jobs_retried == 1  # arq's count of a job cut short by the worker's end
    assert await redis.smembers(keys.partitions[0].worker_running(worker.runtime.worker_id)) == {
        snap.id.encode()
    }
    assert (await t1.get(snap.id)).state == "running"  # the sweeper fails it, a lease on
    assert strays(await all_keys(redis)) == []
