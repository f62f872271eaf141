"""Tickers on a real Redis, in this process: each tick one execution however many tickers
race to it, pause and resume, missed ticks started once or skipped, declared schedules
synced, and what `schedules.*` answer and refuse."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest

from majordomus.config import Settings
from majordomus.context import Context
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.registry import REGISTRY, Registry, capability
from majordomus.schedules import MISSED_CODE, Schedule, ScheduleDefinition
from majordomus.store.keys import Keys
from majordomus.ticker import Ticker
from tests.capabilities import Done, Empty
from tests.conftest import until

EVERY_SECOND = "* * * * * *"


def now_ms() -> int:
    return int(time.time() * 1000)


async def create(engine: Engine, **inp: Any) -> Any:
    inp.setdefault("capability", "tests.noop")
    inp.setdefault("cron", EVERY_SECOND)
    return await engine.invoke("schedules.create", inp)


async def started_by(engine: Engine, schedule_id: str) -> list[Any]:
    listed = await engine.list(capability=None, limit=200)
    return [s for s in listed.executions if s.schedule == schedule_id]


def tick_of(snapshot: Any) -> int:
    return int(snapshot.idempotency_key.rsplit(":", 1)[1])


async def set_down_since(redis: Any, schedule_id: str, since_ms: int) -> None:
    """As if every worker had been down since `since_ms`: nothing ticked after it."""
    key = Keys().schedule(schedule_id)
    await redis.hset(key, mapping={"since_ms": since_ms, "last_tick_ms": since_ms})


async def test_a_created_schedule_is_listed_with_its_next_tick(engine: Engine) -> None:
    made = await create(engine, name="listed", execution_input={}, timezone="Europe/Paris")
    assert (made.id, made.origin, made.paused) == ("tests.noop:listed", "created", False)
    listed = await engine.invoke("schedules.list", {})
    assert [s.id for s in listed.schedules] == ["tests.noop:listed"]
    shown = listed.schedules[0]
    assert shown.timezone == "Europe/Paris" and shown.next_tick_at > shown.created_at
    assert shown.next_ticks[0] == shown.next_tick_at
    assert len(shown.next_ticks) == 5 and shown.next_ticks == sorted(set(shown.next_ticks))


async def test_a_paused_schedule_lists_no_coming_ticks(engine: Engine) -> None:
    made = await create(engine, name="still")
    paused = await engine.invoke("schedules.pause", {"id": made.id})
    assert not paused.schedule.next_ticks and not paused.schedule.next_tick_at


async def test_run_now_starts_one_execution_marked_with_its_schedule_paused_or_not(
    engine: Engine,
) -> None:
    made = await create(
        engine, name="now", capability="tests.sleepy", execution_input={"seconds": 0.1},
        cron="0 0 1 1 *",
    )
    await engine.invoke("schedules.pause", {"id": made.id})
    started = await engine.invoke("schedules.run_now", {"id": made.id})
    assert (started.capability, started.schedule, started.state) == (
        "tests.sleepy", made.id, "queued"
    )
    assert started.input == {"seconds": 0.1}
    assert [s.id for s in await started_by(engine, made.id)] == [started.id]
    with pytest.raises(MajordomusError) as caught:
        await engine.invoke("schedules.run_now", {"id": "tests.noop:nothing"})
    assert caught.value.code == "not_found"


async def test_each_tick_starts_one_execution_however_many_tickers_race_to_it(
    engine: Engine,
) -> None:
    made = await create(engine, name="raced")
    tickers = [Ticker(engine) for _ in range(3)]
    base = now_ms() // 1000 * 1000
    for second in range(1, 11):
        at = base + second * 1000 + 3
        await asyncio.gather(*(t.wake(now_ms=at) for t in tickers))
    started = await started_by(engine, made.id)
    ticks = sorted(tick_of(s) for s in started)
    assert ticks == [base + s * 1000 for s in range(1, 11)]
    assert all(s.actor == "internal" and s.schedule == made.id for s in started)
    listed = (await engine.invoke("schedules.list", {})).schedules[0]
    assert listed.last_execution in {s.id for s in started}


async def test_a_paused_schedule_ticks_not_and_resumes_from_now(engine: Engine) -> None:
    made = await create(engine, name="paused")
    ticker = Ticker(engine)
    paused = await engine.invoke("schedules.pause", {"id": made.id})
    assert (
        paused.changed
        and paused.schedule.paused
        and "next_tick_at" not in msgspec.to_builtins(paused.schedule)
    )
    assert not (await engine.invoke("schedules.pause", {"id": made.id})).changed
    base = now_ms()
    await ticker.wake(now_ms=base + 5_000)
    assert await started_by(engine, made.id) == []
    resumed = await engine.invoke("schedules.resume", {"id": made.id})
    resumed_ms = now_ms()
    assert resumed.changed and not resumed.schedule.paused
    await ticker.wake(now_ms=resumed_ms + 3_500)
    ticks = sorted(tick_of(s) for s in await started_by(engine, made.id))
    assert ticks and all(t > resumed_ms - 1000 for t in ticks)  # nothing from the pause


async def test_missed_ticks_once_start_exactly_one_execution_saying_so(
    engine: Engine, redis: Any
) -> None:
    made = await create(engine, cron="0 0 * * *", name="nightly")  # missed="once"
    await set_down_since(redis, made.id, now_ms() - 3 * 86_400_000)
    for _ in range(2):  # a second ticker back from the outage starts nothing more
        await Ticker(engine).wake()
    started = await started_by(engine, made.id)
    assert len(started) == 1
    latest_midnight = now_ms() // 86_400_000 * 86_400_000
    assert tick_of(started[0]) == latest_midnight
    snap = await engine.get(started[0].id)
    assert [d.code for d in snap.diagnostics] == [MISSED_CODE]
    assert "3 ticks" in snap.diagnostics[0].summary
    listed = (await engine.invoke("schedules.list", {})).schedules[0]
    assert listed.last_execution == started[0].id


async def test_missed_ticks_skip_start_none(engine: Engine, redis: Any) -> None:
    made = await create(engine, cron="0 0 * * *", name="skipper", missed="skip")
    await set_down_since(redis, made.id, now_ms() - 3 * 86_400_000)
    await Ticker(engine).wake()
    assert await started_by(engine, made.id) == []
    listed = (await engine.invoke("schedules.list", {})).schedules[0]
    assert listed.last_tick_at.startswith(time.strftime("%Y-%m-%dT00:00:00", time.gmtime()))


async def test_a_tick_a_few_seconds_late_is_late_not_missed(engine: Engine, redis: Any) -> None:
    made = await create(engine, name="late", missed="skip")
    down_at = now_ms() // 1000 * 1000
    await set_down_since(redis, made.id, down_at)
    await Ticker(engine).wake(now_ms=down_at + 4_500)  # back 4.5 s later, within the grace
    ticks = sorted(tick_of(s) for s in await started_by(engine, made.id))
    assert ticks == [down_at + s * 1000 for s in range(1, 5)]


async def test_a_deleted_schedule_ticks_no_more(engine: Engine) -> None:
    made = await create(engine, name="deleted")
    ticker = Ticker(engine)
    at = now_ms() + 1_500
    await ticker.wake(now_ms=at)
    before = len(await started_by(engine, made.id))
    assert before >= 1
    gone = await engine.invoke("schedules.delete", {"id": made.id})
    assert gone.schedule.id == made.id
    await ticker.wake(now_ms=at + 3_000)
    assert len(await started_by(engine, made.id)) == before
    with pytest.raises(MajordomusError) as caught:
        await engine.invoke("schedules.delete", {"id": made.id})
    assert caught.value.code == "not_found"


@pytest.mark.parametrize(
    ("given", "code", "says"),
    [
        ({"cron": "every second"}, "invalid_input", "not 5 or 6"),
        ({"timezone": "Mars/Olympus_Mons"}, "invalid_input", "not a time zone"),
        (
            {"capability": "tests.sleepy", "execution_input": {"seconds": "long"}},
            "invalid_input",
            "/seconds",
        ),
        ({"capability": "no.such"}, "not_found", "no capability"),
        ({"capability": "executions.list"}, "refused", "cannot be scheduled"),
        ({"name": "with space"}, "invalid_input", "name"),
    ],
)
async def test_a_schedule_that_cannot_run_is_refused_when_created(
    engine: Engine, given: dict[str, Any], code: str, says: str
) -> None:
    with pytest.raises(MajordomusError) as caught:
        await create(engine, **given)
    assert caught.value.code == code
    assert says in caught.value.message, caught.value.message
    assert caught.value.suggestion
    assert (await engine.invoke("schedules.list", {})).count == 0


async def test_a_name_is_one_schedule(engine: Engine) -> None:
    await create(engine, name="twice")
    with pytest.raises(MajordomusError) as caught:
        await create(engine, name="twice")
    assert caught.value.code == "refused"


async def test_a_schedule_input_is_shown_redacted(engine: Engine) -> None:
    made = await create(
        engine,
        capability="tests.login",
        execution_input={"user": "ann", "token": "hunter2"},
        name="secret",
    )
    assert made.input["token"] == "«redacted»"
    assert "hunter2" not in msgspec.json.encode(await engine.invoke("schedules.list", {})).decode()


# -- declared schedules ---------------------------------------------------------------------


def declaring_registry() -> Registry:
    """The built-ins and one capability declaring two schedules (a registry of its own, so
    no other test's worker ticks them)."""
    reg = Registry()
    for cap in REGISTRY:
        if cap.module in ("schedules", "executions"):
            reg.add(cap)

    @capability(
        "tests.declared",
        input=Empty,
        output=Done,
        registry=reg,
        schedules=[Schedule("0 9 * * *"), Schedule(EVERY_SECOND, name="fast", missed="skip")],
    )
    async def declared(ctx: Context, inp: Empty) -> Done:
        return Done()

    return reg


async def test_declared_schedules_are_synced_at_start_and_kept_paused(
    redis: Any, settings: Settings
) -> None:
    engine = Engine(redis, declaring_registry(), settings)
    ticker = Ticker(engine)
    ticker.start()
    try:
        listed = await _until_listed(engine, 2)
        assert [(s.id, s.origin) for s in listed] == [
            ("tests.declared:0", "declared"),
            ("tests.declared:fast", "declared"),
        ]
        await engine.invoke("schedules.pause", {"id": "tests.declared:fast"})
        with pytest.raises(MajordomusError) as caught:
            await engine.invoke("schedules.delete", {"id": "tests.declared:0"})
        assert caught.value.code == "refused" and "pause" in (caught.value.suggestion or "")
    finally:
        await ticker.stop()
    again = Ticker(engine)  # a worker restarting: synced again, its pause kept
    again.start()
    try:

        async def synced() -> bool:
            return again.synced

        await until(synced)
        listed = await _until_listed(engine, 2)
        assert {s.id: s.paused for s in listed} == {
            "tests.declared:0": False,
            "tests.declared:fast": True,
        }
    finally:
        await again.stop()


async def _until_listed(engine: Engine, count: int) -> list[Any]:
    for _ in range(200):
        listed = await engine.invoke("schedules.list", {})
        if listed.count >= count:
            return list(listed.schedules)
        await asyncio.sleep(0.02)
    raise AssertionError("the declared schedules were not synced")


async def test_a_declaration_that_changed_starts_from_now_not_from_its_last_tick(
    redis: Any, settings: Settings
) -> None:
    from majordomus.store.schedules import ScheduleStore
    from majordomus.ticker import sync_declared

    store = ScheduleStore(redis, settings)
    reg = declaring_registry()
    old = {"tests.declared:0": ScheduleDefinition(capability="tests.declared", cron="0 0 * * *")}
    await sync_declared(store, reg, old)
    await set_down_since(redis, "tests.declared:0", now_ms() - 3 * 86_400_000)
    engine = Engine(redis, reg, settings)
    ticker = Ticker(engine)  # its declaration is "0 9 * * *" now: no catch-up of the old one
    await sync_declared(store, reg, ticker.declared)
    await ticker.wake()
    assert await started_by(engine, "tests.declared:0") == []
    stored = await store.one("tests.declared:0")
    assert stored is not None and stored.definition.cron == "0 9 * * *"
