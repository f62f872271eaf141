"""Delayed starts: a start may name when it is due (`start_at`, `delay_ms`). It waits
`queued` with its due time in the snapshot, outside the ready queue (no worker, no traffic),
is started within milliseconds of that time by a worker sleeping until it, and a cancel
before it ends it without ever running it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from majordomus.engine import Engine
from majordomus.start_options import StartOptions
from majordomus.workers.worker import REDIS_TIMEOUT_SLACK_SECONDS
from tests.conftest import FOREVER_MS, LIVENESS_SECONDS, make_settings, running_worker, until
from tests.workers.test_executions import types_of


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


async def _started_ms(engine: Engine, execution_id: str) -> int | None:
    raw = await engine.store.snapshot(execution_id)
    assert raw is not None
    started = raw.get(b"started_ms")
    return int(started) if started else None


async def test_a_delayed_start_waits_queued_with_its_due_time_and_starts_on_time(
    engine: Engine, redis: Any, redis_url: str
) -> None:
    # A fallback poll that never comes: only the worker's wait for the due time starts it.
    cfg = make_settings(redis_url, poll_seconds=FOREVER_MS / 1000)
    async with running_worker(redis, cfg):
        await starts_on_time(engine)


async def starts_on_time(engine: Engine) -> None:
    due = int(time.time() * 1000) + 600
    snap = await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
    assert snap.state == "queued" and isinstance(snap.due_at, str)
    assert _ms(snap.due_at) == due
    read = await engine.get(snap.id)
    assert (read.state, read.due_at) == ("queued", snap.due_at)
    events = await engine.events(snap.id, 0, 10)
    assert events.events[1].data.due_at == snap.due_at  # type: ignore[union-attr]
    # Not in the ready queue while it waits: no worker takes it early.
    keys = engine.store.keys
    assert await engine.redis.zcard(keys.partitions[0].queue) == 0
    assert await engine.redis.zscore(keys.partitions[0].delayed, snap.id) == due
    final = await engine.wait(snap.id, LIVENESS_SECONDS * 1000)
    assert final.state == "succeeded"
    started = await _started_ms(engine, snap.id)
    assert started is not None and started >= due  # never early
    print(f"started {started - due} ms after its due time")
    assert final.due_at == snap.due_at  # kept, so a reader sees how late it started


async def test_an_idle_worker_waits_in_redis_only_until_shortly_before_a_start_is_due(
    engine: Engine, worker: Any
) -> None:
    """Redis ends a blocking wait on its clock tick (up to 100 ms late): a worker that waited
    there until a start's due time would start it that late. Its waits in Redis end before
    the due time by that slack, and it waits the rest by its own clock, then takes."""
    # Each wait the worker decides on: (when, epoch s; how long in Redis, s, or None for a
    # wait here; whether it knew the start's due time then, from its last take's answer).
    waits: list[tuple[float, float | None, bool]] = []
    decide = worker._block_for

    def recorded(timeout: float) -> float | None:
        block = decide(timeout)
        waits.append((time.time(), block, worker._next_due_ms == due))
        return block

    worker._block_for = recorded
    due = int(time.time() * 1000) + 900
    try:
        snap = await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
        final = await engine.wait(snap.id, 5000)
    finally:
        del worker._block_for
    assert final.state == "succeeded"
    started = await _started_ms(engine, snap.id)
    assert started is not None and started >= due
    # A wait decided before the worker's take saw the start (one sent as the start was being
    # created) is cut short by the start's own wake-up; those decided knowing it must end
    # before it is due, by the slack.
    known = [(at, block) for at, block, knew in waits if knew and block is not None]
    assert known, ("the idle worker waited in Redis once it knew of the start", waits, due)
    slack_ms = REDIS_TIMEOUT_SLACK_SECONDS * 1000
    for at, block in known:
        if at * 1000 < due:
            assert (at + block) * 1000 <= due - slack_ms + 5, (at, block, due)


async def test_delay_ms_and_start_at_over_http_shape_start_at_the_later_of_the_two(
    engine: Engine,
) -> None:
    at = datetime.now(UTC) + timedelta(seconds=30)
    snap = await engine.invoke(
        "executions.start",
        {"capability": "tests.noop", "start_at": at.isoformat(), "delay_ms": 60_000},
    )
    assert isinstance(snap.due_at, str)
    assert _ms(snap.due_at) >= int(time.time() * 1000) + 59_000  # the delay, the later one
    past = await engine.invoke(
        "executions.start",
        {"capability": "tests.noop", "start_at": "2001-01-01T00:00:00Z"},
    )
    assert past.due_at is msgspec.UNSET  # a time past is now
    assert await engine.redis.zscore(engine.store.keys.partitions[0].queue, past.id) is not None


async def test_a_delayed_start_cancelled_before_its_time_never_runs(
    engine: Engine, worker: Any
) -> None:
    due = int(time.time() * 1000) + 300
    snap = await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
    answer = await engine.cancel(snap.id)
    assert answer.outcome == "requested" and answer.execution.state == "cancelled"
    assert await engine.redis.zscore(engine.store.keys.partitions[0].delayed, snap.id) is None
    # Past its due time, with a worker beside it: one due just after it has run.
    later = await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due + 1))
    assert (await engine.wait(later.id, LIVENESS_SECONDS * 1000)).state == "succeeded"
    assert (await engine.get(snap.id)).state == "cancelled"
    assert "execution.started" not in await types_of(engine, snap.id)


async def test_an_idle_worker_makes_no_extra_trips_while_delayed_work_waits(
    engine: Engine, worker: Any
) -> None:
    """A thousand executions due in a minute: the worker sleeps until the first is due (or
    its long-poll fallback), so Redis sees no polling for them."""
    due = int(time.time() * 1000) + 60_000
    for _ in range(1000):
        await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
    wakeup = engine.store.keys.partitions[0].wakeup

    async def wake_ups_answered() -> bool:
        return await engine.redis.llen(wakeup) == 0

    await until(wake_ups_answered)
    store = worker.runtime.store
    takes = 0
    originals = {name: getattr(store, name) for name in ("take", "take_blocking")}

    def counting(original: Any) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal takes
            takes += 1
            return await original(*args, **kwargs)

        return counted

    for name, original in originals.items():  # plain takes and the ones that wait in Redis
        setattr(store, name, counting(original))
    try:
        await asyncio.sleep(1.5)  # time passes: what the worker does meanwhile is counted
    finally:
        for name in originals:
            delattr(store, name)
    # The long-poll fallback (1 s) and the odd wake-up, not a poll per entry (a thousand)
    # nor a busy loop.
    assert takes <= 10, takes
    assert await engine.redis.zcard(engine.store.keys.partitions[0].delayed) == 1000


async def test_many_delayed_executions_come_due_together_and_all_start(
    engine: Engine, worker: Any
) -> None:
    due = int(time.time() * 1000) + 400
    ids = [
        (await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))).id
        for _ in range(300)
    ]

    async def all_done() -> bool:
        states = await engine.store.states(ids)
        return all(s == "succeeded" for s in states)

    assert await until(all_done, timeout=20)
    assert await engine.redis.zcard(engine.store.keys.partitions[0].delayed) == 0


async def test_a_start_due_past_the_retention_keeps_its_input_and_its_key_until_then(
    engine: Engine,
) -> None:
    """Due in 30 days with a 7-day retention: its worker-only input (secrets) and its
    idempotency key outlive the retention by as long as it waits."""
    due = int(time.time() * 1000) + 30 * 24 * 3600 * 1000
    snap = await engine.start(
        "tests.login",
        {"user": "ada", "token": "s3cret"},
        options=StartOptions(start_at_ms=due, idempotency_key="far-ahead"),
    )
    keys = engine.store.keys
    retain_ms = engine.settings.retain_seconds * 1000
    for key in (keys.secret_input(snap.id), keys.partitions[0].idempotency("far-ahead")):
        ttl = await engine.redis.pttl(key)
        assert ttl > retain_ms + 29 * 24 * 3600 * 1000, (key, ttl)
