"""Cancel or retry every execution a filter matches (issue 36, point 3): the bulk actions
run as executions of their own on a worker, each cancel or retry atomic per execution,
and an interrupted one (its worker process killed, or the action cancelled) is finished by
the same filter run again, never doing one execution twice. Real Redis, real workers.
"""

from __future__ import annotations

import signal
from datetime import datetime
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.matching import Match
from majordomus.start_options import StartOptions
from tests.conftest import WorkerProcess, running_worker, until


def _later() -> StartOptions:
    """Due in an hour: queued, and still queued when the bulk action reaches it."""
    return StartOptions(start_at_ms=int(datetime.now().timestamp() * 1000) + 3_600_000)


async def _queued(engine: Engine, capability: str, n: int) -> list[str]:
    options = _later()
    given = {"customer": "acme"} if capability == "tests.order" else {}
    return [(await engine.start(capability, given, options=options)).id for _ in range(n)]


async def _states(engine: Engine, ids: list[str]) -> list[str | None]:
    return await engine.store.states(ids)


async def test_cancel_matching_cancels_what_matches_and_nothing_else(
    engine: Engine, redis: Any, settings: Any
) -> None:
    async with running_worker(redis, settings):
        running = await engine.start("tests.sleepy", {"seconds": 30})
        await until(lambda: _is(engine, running.id, "running"), timeout=20)
        done = await engine.start("tests.noop", {})
        await engine.wait(done.id, timeout_ms=20_000)
        noops = await _queued(engine, "tests.noop", 30)
        others = await _queued(engine, "tests.order", 5)  # another capability: untouched

        counted = await engine.count(Match(capability="tests.noop"))
        assert (counted.matching, counted.cancellable) == (31, 30)
        called = await engine.call(
            "executions.cancel_matching", {"capability": "tests.noop"}, wait_ms=30_000
        )
        out = called.output
        assert (out["matched"], out["cancelled"], out["asked"], out["passed"]) == (31, 30, 0, 1)
        assert set(await _states(engine, noops)) == {"cancelled"}
        assert set(await _states(engine, others)) == {"queued"}
        # Its own execution shows its progress, and it never matched itself.
        bulk = called.execution
        assert bulk is not None and bulk.state == "succeeded"
        assert bulk.progress.current == 30 and bulk.progress.total == 30  # type: ignore[union-attr]

        # A running one is asked to stop, as executions.cancel asks it.
        asked = await engine.call(
            "executions.cancel_matching", {"state": "running"}, wait_ms=30_000
        )
        assert (asked.output["asked"], asked.output["cancelled"]) == (1, 0)
        assert (await engine.wait(running.id, timeout_ms=20_000)).state == "cancelled"
        # Run again, it finds nothing left to do.
        again = await engine.call(
            "executions.cancel_matching", {"capability": "tests.noop"}, wait_ms=30_000
        )
        assert (again.output["cancelled"], again.output["passed"]) == (0, 31)


async def _is(engine: Engine, execution_id: str, state: str) -> bool:
    return await engine.state_of(execution_id) == state


async def test_retry_matching_starts_each_failed_or_cancelled_one_again_once(
    engine: Engine, redis: Any, settings: Any
) -> None:
    async with running_worker(redis, settings):
        failed = [await engine.start("tests.boom", {}) for _ in range(4)]
        secret = await engine.start("tests.leaky", {"user": "u", "token": "hunter2-hunter2"})
        ok = await engine.start("tests.noop", {})
        for x in [*failed, secret, ok]:
            await engine.wait(x.id, timeout_ms=20_000)
        [cancelled] = await _queued(engine, "tests.order", 1)
        await engine.cancel(cancelled)

        called = await engine.call("executions.retry_matching", {}, wait_ms=30_000)
        out = called.output
        assert (out["matched"], out["retried"], out["secret"], out["unknown"]) == (7, 5, 1, 0)
        assert out["passed"] == 1  # the one that succeeded
        for original in [*(x.id for x in failed), cancelled]:
            snap = await engine.get(original)
            assert isinstance(snap.retried_as, str)
            retry = await engine.get(snap.retried_as)
            assert retry.retry_of == original and retry.capability == snap.capability
            assert retry.input == snap.input and retry.attempt == 2
        # Again: each already retried is passed by, none is retried twice.
        again = await engine.call(
            "executions.retry_matching", {"state": "cancelled"}, wait_ms=30_000
        )
        assert again.output["retried"] == 0


async def test_a_cancelled_bulk_action_stops_and_the_same_filter_again_does_the_rest(
    engine: Engine, redis: Any, settings: Any
) -> None:
    noops = await _queued(engine, "tests.noop", 3000)
    async with running_worker(redis, settings):
        bulk = await engine.start("executions.cancel_matching", {"capability": "tests.noop"})
        await until(lambda: _progressed(engine, bulk.id), timeout=60)
        await engine.cancel(bulk.id)
        stopped = await engine.wait(bulk.id, timeout_ms=30_000)
        assert stopped.state == "cancelled"
        left = (await engine.count(Match(capability="tests.noop"))).cancellable
        assert 0 < left < 3000
        again = await engine.call(
            "executions.cancel_matching", {"capability": "tests.noop"}, wait_ms=60_000
        )
        assert again.output["cancelled"] == left
        assert again.output["passed"] == 3000 - left
    assert set(await _states(engine, noops)) == {"cancelled"}


async def _progressed(engine: Engine, execution_id: str) -> bool:
    snap = await engine.get(execution_id)
    return snap.progress is not None and getattr(snap.progress, "current", 0) > 0


@pytest.mark.usefixtures("spawns")
async def test_a_bulk_cancel_whose_worker_is_killed_is_finished_by_the_same_filter_again(
    engine: Engine, redis_url: str
) -> None:
    noops = await _queued(engine, "tests.noop", 6000)
    first = WorkerProcess(redis_url)
    try:
        bulk = await engine.start("executions.cancel_matching", {"capability": "tests.noop"})
        await until(lambda: _progressed(engine, bulk.id), timeout=60)
        first.kill(signal.SIGKILL)
        first.wait()
        left = (await engine.count(Match(capability="tests.noop"))).cancellable
        assert 0 < left < 6000, left
    finally:
        first.kill()
    second = WorkerProcess(redis_url)
    try:
        again = await engine.call(
            "executions.cancel_matching", {"capability": "tests.noop"}, wait_ms=60_000
        )
        assert again.execution is not None and again.execution.state == "succeeded", again
        # What the killed run did is passed by; each execution is cancelled once, atomically:
        # created, queued, cancelled, and nothing more.
        assert again.output["cancelled"] <= left
        assert set(await _states(engine, noops)) == {"cancelled"}
        rows = await engine.store.snapshot_fields(noops, ["last_seq"])
        assert {row[0] for row in rows} == {b"3"}
        # The killed run's own execution is retried by the sweeper (its worker lost), and
        # that retry finds nothing left either.
        await until(lambda: _chain_ended(engine, bulk.id), timeout=60)
    finally:
        second.kill()
        second.wait()


async def _chain_ended(engine: Engine, execution_id: str) -> bool:
    snap = await engine.get(execution_id)
    while isinstance(snap.retried_as, str):
        snap = await engine.get(snap.retried_as)
    return snap.state in ("succeeded", "failed", "cancelled")


async def test_an_interrupted_retry_matching_never_retries_one_twice(
    engine: Engine, redis: Any, settings: Any
) -> None:
    cancelled = await _queued(engine, "tests.order", 1500)
    await engine.call("executions.cancel_matching", {"capability": "tests.order"}, wait_ms=0)
    async with running_worker(redis, settings):
        await until(lambda: _none_queued(engine), timeout=60)
        again = {"capability": "tests.order", "state": "cancelled"}
        bulk = await engine.start("executions.retry_matching", again)
        await until(lambda: _progressed(engine, bulk.id), timeout=60)
        await engine.cancel(bulk.id)
        await engine.wait(bulk.id, timeout_ms=30_000)
        await engine.call("executions.retry_matching", again, wait_ms=60_000)
        retried_as = await engine.store.snapshot_fields(cancelled, ["retried_as"])
        links = [row[0] for row in retried_as]
        assert None not in links and len(set(links)) == 1500
        # Every retry points back at one original, and no original has two.
        retries = await engine.store.snapshot_fields([x.decode() for x in links if x], ["retry_of"])
        assert sorted(row[0].decode() for row in retries if row[0]) == sorted(cancelled)


async def _none_queued(engine: Engine) -> bool:
    return (await engine.count(Match(capability="tests.order", state="queued"))).matching == 0
