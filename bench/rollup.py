"""The roll-up the charts read (`majordomus.store.rollup`): what it costs Redis per
execution, what it holds a day, and how long the charts' read of a day takes.

**Cost.** On a redis-server of the run's own, measured twice:
- the roll-up's own work, as the scripts do it for one execution (its start's count, its
  end's count, a tenth of a take's ZMSCORE of ten), in one script's loop of N executions
  against the same loop without it: the least disturbed of eight runs of each (the work is
  the same in every run), so the figure is the work's, not the machine's mood;
- the whole life of an execution, `redis_cost`'s measure (N `bench.noop` enqueued, then
  drained by one worker of `max_jobs` 10, the server's own CPU over both phases, divided by
  N), with the roll-up and without it (`MAJORDOMUS_ROLLUP_KEEP_SECONDS=0`: its counts left
  out of every start and end), in alternating rounds (each first in turn), the median of
  each shown and every round noted: on a busy machine these rounds swing by more than the
  roll-up costs.

**Memory.** A day of minutes (an hour in a quick run, the day figured from it) written
through the roll-up's own Lua functions (`lua/rollup.lua`), for 1 and for 10 busy
capabilities: each minute, each capability 60 starts and 60 ends, waits and durations
spread as a service's are (log-normal: waits around 3 ms, durations around 40 ms to 2 s,
one end in fifty failed), so each minute's hash holds the buckets such traffic fills. The
memory is Redis's own account of each key (`MEMORY USAGE ... SAMPLES 0`), summed; the
worst case (every bucket of every kind filled in every minute) is figured from one such
minute. What is held at once is the day and the hour more it keeps (25 h).

**Read.** `executions.stats` of the last day over the 10-capability day: a process's first
read (1,440 minutes, one HGETALL each), then the median of its next five (the steps already
final are kept, `RollupStore.rollup_steps`: only the last one or two quarters of an hour
are read again).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis

from bench.harness import Bench, Row
from bench.redis_cost import cpu_per_execution, server_cpu
from majordomus.config import Settings
from majordomus.stats import execution_stats
from majordomus.store.keys import ROLLUP_STEPS, Keys
from majordomus.store.rollup import bucket_bounds, bucket_of
from majordomus.store.scripts import LUA_DIR, with_constants

ROUNDS = 4
PER_MINUTE = 60
"""Starts (and ends) a minute of each capability."""
OWN = """
local n, counted = tonumber(ARGV[1]), ARGV[2] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ten = {'x0', 'x1', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7', 'x8', 'x9'}
for i = 1, n do
  local wait, took = (i % 7) + 1, (i % 13) * 3 + 2
  if counted then
    if i % 10 == 0 then redis.call('ZMSCORE', QUEUED, unpack(ten)) end
    rollup_add(now, rollup_field('w', wait, 'bench.noop'), 1)
    rollup_add(now, rollup_field('s', took, 'bench.noop'), 1)
  else
    local _ = wait + took
  end
end
return 1
"""
WRITE = """
for i = 1, #ARGV, 5 do
  rollup_add(tonumber(ARGV[i]), rollup_field(ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]),
    tonumber(ARGV[i + 4]))
end
return 1
"""


async def run(bench: Bench) -> list[Row]:
    from majordomus.local.embedded import EmbeddedRedis

    n = bench.size(10_000, 300)
    on: list[float] = []
    off: list[float] = []
    with EmbeddedRedis() as server:
        own = Bench(server.url, bench.quick, bench.workdir, bench.prefix)
        own_us = await _own_cpu(own, bench.size(20_000, 2_000))
        for i in range(bench.size(ROUNDS, 1)):
            # Each first in turn: a round's place in the pair must not tip the comparison.
            for counted in (True, False) if i % 2 == 0 else (False, True):
                if counted:
                    on.append(sum(await cpu_per_execution(own, n)))
                else:
                    off.append(sum(await cpu_per_execution(own, n, rollup_keep_seconds="0")))
        minutes = bench.size(1440, 60)
        await own.flush()
        one = await _day_bytes(own, minutes, 1)
        await own.flush()
        ten = await _day_bytes(own, minutes, 10)
        read_ms, again_ms = await _day_read_ms(own)
        await own.flush()
        worst = await _worst_minute_bytes(own)
    with_us, without_us = statistics.median(on), statistics.median(off)
    bench.note(
        f"rollup: the roll-up's own Redis CPU per execution (its two counts and a tenth of a "
        f"ZMSCORE, in a script's loop): {own_us:.2f} us, {own_us / without_us:.1%} of the "
        f"{without_us:.0f} us of a whole life without it."
    )
    bench.note(
        f"rollup: Redis CPU per no-op execution, start to final, {with_us:.1f} us with the "
        f"roll-up and {without_us:.1f} us without ({with_us / without_us:.2f}x) in the median "
        f"rounds ({n} executions a round, one worker of max_jobs 10); round by round (with, "
        "without): " + ", ".join(f"{a:.1f}, {b:.1f} us" for a, b in zip(on, off, strict=True)) + "."
    )
    bench.note(
        f"rollup: memory a day (1,440 minutes; {minutes} written, {PER_MINUTE} starts and ends "
        f"a minute a capability): {one / 2**20:.2f} MiB for 1 capability, {ten / 2**20:.2f} MiB "
        f"for 10; held at most (25 h kept): {one * 1500 / 1440 / 2**20:.2f} and "
        f"{ten * 1500 / 1440 / 2**20:.2f} MiB; the worst case, every bucket of every kind filled "
        f"every minute, {worst * 1440 / 2**20:.1f} MiB a day a capability; executions.stats of "
        f"the last day over 10 capabilities read in {read_ms:.0f} ms by a process's first read, "
        f"{again_ms:.0f} ms by the next (its final steps kept)."
    )
    return [
        Row(
            "rollup",
            "the roll-up's own Redis CPU per execution (its counts)",
            own_us,
            " us",
            baseline=without_us,
            baseline_name="a no-op execution's whole life without it",
            goal="<= 0.10x",
            met=own_us <= 0.10 * without_us,
            higher_is_better=False,
        ),
        Row(
            "rollup",
            "Redis CPU per no-op execution, start to final, with the roll-up",
            with_us,
            " us",
            baseline=without_us,
            baseline_name="the same without it (MAJORDOMUS_ROLLUP_KEEP_SECONDS=0)",
            higher_is_better=False,
        ),
        Row(
            "rollup",
            "roll-up memory a day, 1 busy capability",
            one / 2**20,
            " MiB",
            higher_is_better=False,
        ),
        Row(
            "rollup",
            "roll-up memory a day, 10 busy capabilities",
            ten / 2**20,
            " MiB",
            higher_is_better=False,
        ),
        Row(
            "rollup",
            "executions.stats of the last day, 10 capabilities, a process's first read",
            read_ms,
            " ms",
            higher_is_better=False,
        ),
        Row(
            "rollup",
            "executions.stats of the last day, 10 capabilities, read again",
            again_ms,
            " ms",
            higher_is_better=False,
        ),
    ]


async def _own_cpu(bench: Bench, n: int) -> float:
    """Redis CPU us per execution of the roll-up's own work, as take.lua and append.lua do
    it (a start's count, an end's count, a tenth of a take's ZMSCORE of ten), measured as
    one script's loop of `n` executions against the same loop without it."""
    redis = aioredis.from_url(bench.redis_url)
    base = Keys(bench.prefix).partitions[0].base
    script = redis.register_script(
        with_constants((LUA_DIR / "rollup.lua").read_text() + OWN, {
            "BASE": base, "ROLLUP_STEPS": ROLLUP_STEPS, "ROLLUP_KEEP_MS": 60_000,
            "QUEUED": base + "idx:queued",
        })
    )  # fmt: skip
    try:
        await bench.flush()
        await redis.zadd(base + "idx:queued", {f"x{i}": i for i in range(10)})
        spent: dict[bool, list[float]] = {True: [], False: []}
        for i in range(bench.size(8, 2)):
            for counted in (True, False) if i % 2 == 0 else (False, True):
                before = await server_cpu(redis)
                await script(args=[n, "1" if counted else "0"])
                spent[counted].append((await server_cpu(redis) - before) / n * 1e6)
        # The least disturbed run of each: the work is the same in every run.
        return min(spent[True]) - min(spent[False])
    finally:
        await redis.aclose()


def _script(bench: Bench) -> str:
    base = Keys(bench.prefix).partitions[0].base
    keep_ms = Settings().rollup_keep_seconds * 1000
    constants: dict[str, str | int] = {
        "BASE": base,
        "ROLLUP_STEPS": ROLLUP_STEPS,
        "ROLLUP_KEEP_MS": keep_ms,
    }
    return with_constants((LUA_DIR / "rollup.lua").read_text() + WRITE, constants)


Counts = Iterable[tuple[str, float | None, str, int]]
"""(kind, a measure of its bucket or None for none, capability, count) to add."""


def _minute_counts(rng: random.Random, capabilities: int) -> Counts:
    """(kind, a measure of its bucket, capability, count) of one minute's traffic."""
    for c in range(capabilities):
        cap = f"bench.cap{c}"
        took = 40 * (1.5**c)  # the capabilities' durations: 40 ms to 1.5 s
        counts: dict[tuple[str, int], tuple[float, int]] = {}
        for _ in range(PER_MINUTE):
            wait = rng.lognormvariate(math.log(3), 1.0)
            duration = rng.lognormvariate(math.log(took), 0.7)
            for kind, ms in (("w", wait), ("f" if rng.random() < 0.02 else "s", duration)):
                first, seen = counts.get((kind, bucket_of(ms)), (ms, 0))
                counts[(kind, bucket_of(ms))] = (first, seen + 1)
        for (kind, _), (ms, count) in counts.items():
            yield kind, ms, cap, count


async def _write(redis: Any, script: str, at_ms: int, counts: Counts) -> None:
    args: list[Any] = []
    for kind, ms, cap, count in counts:
        args += [at_ms, kind, "" if ms is None else repr(ms), cap, count]  # '': no measure
    if args:
        await redis.eval(script, 0, *args)


async def _memory(redis: Any, pattern: str) -> int:
    total = 0
    async for key in redis.scan_iter(match=pattern, count=1000):
        total += int(await redis.memory_usage(key, samples=0) or 0)
    return total


async def _day_bytes(bench: Bench, minutes: int, capabilities: int) -> int:
    """The roll-up's bytes of a day of `capabilities` busy ones, figured from `minutes`."""
    redis = aioredis.from_url(bench.redis_url)
    rng = random.Random(capabilities)
    script = _script(bench)
    now_minute = int(time.time()) // 60
    try:
        for back in range(minutes):
            await _write(
                redis, script, (now_minute - back) * 60_000, _minute_counts(rng, capabilities)
            )
        held = await _memory(redis, Keys(bench.prefix).partitions[0].base + "rollup:*")
    finally:
        await redis.aclose()
    return held * 1440 // minutes


async def _worst_minute_bytes(bench: Bench) -> int:
    """One capability's minute with every bucket of every kind filled (1 ms to a day)."""
    redis = aioredis.from_url(bench.redis_url)
    top = bucket_of(86_400_000)
    counts = [
        (kind, bucket_bounds(b)[0], "bench.cap0", 1) for kind in "wsfc" for b in range(top + 1)
    ]
    counts += [(kind, None, "bench.cap0", 1) for kind in "fc"]  # ended without a start
    try:
        await _write(redis, _script(bench), int(time.time() * 1000), counts)
        return await _memory(redis, Keys(bench.prefix).partitions[0].base + "rollup:*")
    finally:
        await redis.aclose()


async def _day_read_ms(bench: Bench) -> tuple[float, float]:
    """(ms of a process's first read of the last day, the median of its next five): the
    first reads every minute, the next only the steps not yet final (`RollupStore`)."""
    times = []
    async with bench.engine() as engine:
        for _ in range(6):
            began = time.perf_counter()
            report = await execution_stats(engine, "day", None)
            times.append((time.perf_counter() - began) * 1000)
        assert len(report.capabilities) == 10, "the day written is not the day read"
    return times[0], statistics.median(times[1:])
