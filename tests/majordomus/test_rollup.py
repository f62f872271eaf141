"""The per-minute roll-up (`majordomus.store.rollup`): every start counted once by its wait
and every end once by its final state and duration, in the step that moves the execution,
in the partition's slot, kept a day and an hour; and `executions.stats`, the series read
from it.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.start_options import StartOptions
from majordomus.stats import POINTS, execution_stats
from majordomus.store.keys import Keys, slot_of
from majordomus.store.rollup import Tally, bucket_bounds, bucket_of, percentile
from majordomus.store.scripts import LUA_DIR, with_constants
from tests.conftest import make_settings, running_worker, until

WORKER = "counter"


async def take(engine: Engine, token: str | None = None) -> list[str]:
    """A take by a worker whose lease holds, in every partition; the ids it started."""
    for part in engine.store.keys.partitions:
        await engine.redis.set(part.lease(WORKER), 1, px=60_000)
    took = await engine.store.take(WORKER, 10, token or engine.store.next_token())
    return [t.execution_id for t in took.taken]


async def rollup(engine: Engine) -> dict[str, Tally]:
    """Every minute of the last hour, summed, by capability."""
    now_minute = int(datetime.now(UTC).timestamp()) // 60
    summed: dict[str, Tally] = {}
    for tallies in (await engine.store.rollup_minutes(now_minute - 60, now_minute + 1)).values():
        for name, tally in tallies.items():
            summed.setdefault(name, Tally()).add(tally)
    return summed


async def test_the_scripts_and_the_reader_put_a_measure_in_one_bucket(redis: Any) -> None:
    measures = [
        0,
        0.5,
        1,
        2,
        3,
        4,
        7,
        8,
        16,
        100,
        999,
        1000,
        1024,
        4096,
        59_999,
        3_600_000,
        86_400_000,
    ]
    text = (
        (LUA_DIR / "rollup.lua").read_text()
        + """
local out = {}
for i = 1, #ARGV do out[i] = rollup_field('w', tonumber(ARGV[i]), 'a.cap') end
return out
"""
    )
    script = with_constants(text, {"BASE": "t:", "ROLLUP_STEPS": 4, "ROLLUP_KEEP_MS": 1})
    fields = await redis.eval(script, 0, *[str(m) for m in measures])
    assert [f.decode() for f in fields] == [f"w:{bucket_of(m)}:a.cap" for m in measures]
    for m in measures:
        low, high = bucket_bounds(bucket_of(m))
        assert low <= m < high


def test_a_percentile_is_read_within_the_bucket_it_falls_in() -> None:
    values = [10.0] * 50 + [1000.0] * 45 + [60_000.0] * 5
    histogram = Counter(bucket_of(v) for v in values)
    p50, p95 = percentile(histogram, 0.5), percentile(histogram, 0.95)
    assert p50 is not None and p95 is not None
    assert bucket_bounds(bucket_of(10))[0] <= p50 <= bucket_bounds(bucket_of(10))[1]
    assert bucket_bounds(bucket_of(1000))[0] <= p95 <= bucket_bounds(bucket_of(1000))[1]
    assert percentile(Counter(), 0.5) is None


async def test_a_start_counts_its_wait_and_an_end_its_state_and_duration(engine: Engine) -> None:
    keys = engine.store.keys
    part = keys.partitions[0]
    done, failed = (
        (await engine.start("tests.noop", {})).id,
        (await engine.start("tests.boom", {})).id,
    )
    # Both waited 2 s, as if created 2 s before now.
    for x in (done, failed):
        await engine.redis.zadd(
            part.queued, {x: int(await engine.redis.zscore(part.queued, x)) - 2000}, xx=True
        )
    due = {x: int(await engine.redis.zscore(part.queued, x)) for x in (done, failed)}
    assert sorted(await take(engine)) == sorted([done, failed])
    # The first ran 3 s.
    started = int(await engine.redis.hget(keys.snapshot(done), "started_ms"))
    await engine.redis.hset(keys.snapshot(done), "started_ms", started - 3000)
    await engine.store.append(done, [("execution.completed", b'{"output":{}}')])
    await engine.store.append(
        failed, [("execution.failed", b'{"error":{"code":"internal","message":"x"}}')]
    )

    tallies = await rollup(engine)
    waits = {x: int(await engine.redis.hget(keys.snapshot(x), "started_ms")) for x in (failed,)}
    waits[done] = started
    assert tallies["tests.noop"].waits == Counter({bucket_of(waits[done] - due[done]): 1})
    assert tallies["tests.boom"].waits == Counter({bucket_of(waits[failed] - due[failed]): 1})
    duration = int(await engine.redis.hget(keys.snapshot(done), "duration_ms"))
    ended = (await engine.get(done)).finished_at
    assert isinstance(ended, str)
    ended_ms = round(datetime.fromisoformat(ended.replace("Z", "+00:00")).timestamp() * 1000)
    assert duration == ended_ms - (started - 3000)  # from its start to its end, the 3 s in
    assert tallies["tests.noop"].durations == Counter({bucket_of(duration): 1})
    assert tallies["tests.noop"].ends == Counter({"succeeded": 1})
    assert tallies["tests.boom"].ends == Counter({"failed": 1})
    assert sum(tallies["tests.boom"].durations.values()) == 1


async def test_one_cancelled_while_queued_counts_an_end_without_a_duration(engine: Engine) -> None:
    due = int(datetime.now(UTC).timestamp() * 1000) + 60_000
    later = await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=due))
    await engine.cancel(later.id)
    tallies = await rollup(engine)
    assert tallies["tests.noop"].ends == Counter({"cancelled": 1})
    assert tallies["tests.noop"].started == 0
    assert not tallies["tests.noop"].durations


async def test_a_take_or_an_end_sent_again_counts_nothing_twice(engine: Engine) -> None:
    x = (await engine.start("tests.noop", {})).id
    token = engine.store.next_token()
    assert await take(engine, token) == [x]
    assert await take(engine, token) == [x]  # the same take, its answer lost: answered again
    end = engine.store.next_token()
    for _ in range(2):
        await engine.store.append(x, [("execution.completed", b'{"output":{}}')], token=end)
    tallies = await rollup(engine)
    assert (tallies["tests.noop"].started, tallies["tests.noop"].ends) == (
        1,
        Counter({"succeeded": 1}),
    )


async def test_a_minute_is_kept_a_day_and_an_hour_after_it_ends(engine: Engine) -> None:
    assert engine.settings.rollup_keep_seconds == 25 * 3600
    x = (await engine.start("tests.noop", {})).id
    await take(engine)
    await engine.store.append(x, [("execution.completed", b'{"output":{}}')])
    part = engine.store.keys.partitions[0]
    stored = [k async for k in engine.redis.scan_iter(match=part.base + "rollup:*")]
    assert stored
    for key in stored:
        minute = int(key.decode().rsplit(":", 1)[1])
        expires_ms = await engine.redis.pexpiretime(key)
        assert expires_ms == (minute + 1) * 60_000 + engine.settings.rollup_keep_seconds * 1000


async def test_with_no_rollup_kept_nothing_is_counted(redis: Any, redis_url: str) -> None:
    engine = Engine(redis, REGISTRY, make_settings(redis_url, rollup_keep_seconds=0))
    x = (await engine.start("tests.noop", {})).id
    assert await take(engine) == [x]
    await engine.store.append(x, [("execution.completed", b'{"output":{}}')])
    assert (await engine.get(x)).state == "succeeded"
    assert [k async for k in redis.scan_iter(match="*rollup*")] == []
    assert (await execution_stats(engine, "hour", None)).overall.total.succeeded == 0


def test_a_partitions_rollup_is_in_its_slot() -> None:
    keys = Keys("md", 4)
    for part in keys.partitions:
        assert (
            slot_of(part.rollup(29_000_000)) == slot_of(part.snapshot("x-1")) == slot_of(part.queue)
        )
        assert part.rollup(29_000_000).startswith(part.base)


async def test_the_report_is_a_point_a_step_of_every_capability_and_of_each(
    redis: Any, redis_url: str
) -> None:
    settings = make_settings(redis_url, partitions=3)
    engine = Engine(redis, REGISTRY, settings)
    async with running_worker(redis, settings):
        for _ in range(6):
            await engine.start("tests.noop", {})
        for _ in range(2):
            await engine.start("tests.boom", {})
        await until(_finished(engine, 8))
    hour = await execution_stats(engine, "hour", None)
    assert (hour.step_seconds, len(hour.overall.points)) == (60, POINTS["hour"])
    total = hour.overall.total
    assert (total.started, total.succeeded, total.failed, total.cancelled) == (8, 6, 2, 0)
    assert total.wait_p50_ms is not None and total.duration_p95_ms is not None
    assert [s.capability for s in hour.capabilities] == ["tests.noop", "tests.boom"]
    assert hour.capabilities[1].total.failed == 2
    assert sum(p.started for p in hour.overall.points) == 8
    day = await execution_stats(engine, "day", "tests.boom")
    assert (day.step_seconds, len(day.overall.points)) == (900, POINTS["day"])
    assert (day.overall.total.started, day.overall.total.failed) == (2, 2)
    assert [s.capability for s in day.capabilities] == ["tests.boom"]
    # A step begins where the one before it ends, and the last holds now.
    ats = [datetime.fromisoformat(p.at) for p in day.overall.points]
    assert {(b - a).total_seconds() for a, b in zip(ats, ats[1:], strict=False)} == {900}
    assert ats[-1] <= datetime.fromisoformat(day.until) < ats[-1] + (ats[1] - ats[0])


def _finished(engine: Engine, count: int) -> Any:
    async def check() -> bool:
        return await engine.store.finished_count() >= count

    return check


@pytest.mark.parametrize("span", ["hour", "day"])
async def test_an_empty_span_answers_empty_points(engine: Engine, span: Any) -> None:
    report = await execution_stats(engine, span, None)
    assert len(report.overall.points) == POINTS[span]
    assert report.capabilities == [] and report.overall.total.started == 0
    assert report.overall.total.wait_p50_ms is None


async def test_past_its_bound_the_report_names_the_busiest_and_counts_the_rest(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("majordomus.stats.STATS_CAPABILITIES", 1)
    ids = [(await engine.start("tests.noop", {})).id for _ in range(3)]
    ids.append((await engine.start("tests.boom", {})).id)
    assert sorted(await take(engine)) == sorted(ids)
    report = await execution_stats(engine, "hour", None)
    assert [s.capability for s in report.capabilities] == ["tests.noop"]
    assert report.more_capabilities == 1
    assert report.overall.total.started == 4  # every capability, shown or not


async def test_a_claim_by_append_counts_its_wait_as_a_take_does(engine: Engine) -> None:
    x = (await engine.start("tests.noop", {})).id
    part = engine.store.keys.partitions[0]
    due = int(await engine.redis.zscore(part.queued, x))
    claimed, _ = await engine.store.claim(x, WORKER)
    assert claimed.complete
    started = int(await engine.redis.hget(engine.store.keys.snapshot(x), "started_ms"))
    assert (await rollup(engine))["tests.noop"].waits == Counter({bucket_of(started - due): 1})


async def test_an_end_is_counted_in_the_minute_of_redis_clock_whatever_the_callers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = (await engine.start("tests.noop", {})).id
    assert await take(engine) == [x]
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    behind = now_ms - 10 * 60_000  # a caller whose clock is ten minutes behind
    monkeypatch.setattr("majordomus.store.executions.now_stamp", lambda: ("", behind))
    await engine.store.append(x, [("execution.completed", b'{"output":{}}')])
    redis_minute = int((await engine.redis.time())[0]) // 60
    part = engine.store.keys.partitions[0]
    stored = [  # (this minute, or the one before should it have turned meanwhile)
        name
        for m in (redis_minute - 1, redis_minute)
        for name in await engine.redis.hgetall(part.rollup(m))
    ]
    assert any(name.startswith(b"s:") for name in stored)
    assert not await engine.redis.exists(part.rollup(behind // 60_000))


async def test_a_final_step_is_read_once_and_kept_while_the_last_ones_are_read_again(
    engine: Engine,
) -> None:
    part = engine.store.keys.partitions[0]
    now_minute = int((await engine.redis.time())[0]) // 60
    field = f"s:{bucket_of(5)}:tests.noop"
    await engine.redis.hincrby(part.rollup(now_minute - 10), field, 1)
    first = await execution_stats(engine, "hour", None)
    assert first.overall.total.succeeded == 1
    # A count in a minute long past (none is ever written so) is not read again...
    await engine.redis.hincrby(part.rollup(now_minute - 10), field, 1)
    # ...while the current minute's are.
    x = (await engine.start("tests.noop", {})).id
    await take(engine)
    await engine.store.append(x, [("execution.completed", b'{"output":{}}')])
    again = await execution_stats(engine, "hour", None)
    assert (again.overall.total.succeeded, again.overall.total.started) == (2, 1)
    # Another reader reads it all.
    fresh = Engine(engine.redis, REGISTRY, engine.settings)
    assert (await execution_stats(fresh, "hour", None)).overall.total.succeeded == 3
