"""Scenario "events": how many events per second one handler gets into Redis.

Ours: `bench.emit` reports progress in a tight loop (50,000 reports; 2,000 in a quick run)
on a majordomus worker process of its own. The rate is the reports over the execution's
`duration_ms`, which the store computes (in milliseconds) from two stamps it takes itself:
the `execution.started` append (the claim, just before the handler runs) and the terminal
append, which the context sends only after every report is written. So the time covers the
handler's whole run and every write of its reports, each event being a stream entry, a
global feed entry and a fold into the snapshot, made by `append.lua` in batches of
`BATCH_EVENTS`. Meanwhile this process only polls the execution's state, so it takes no
core from the worker or Redis.

Baseline: the same number of raw `XADD <key> MAXLEN 500 * e <envelope>` from redis-py's
asyncio client in this process, sent in pipelines of `BATCH_EVENTS` commands one after the
other (as the context has one append in flight at a time), each entry as large as one of our
progress envelopes read back from the execution's stream. The two alternate, and each
figure is the median of its runs. It deliberately does not count the time a worker takes to
pick the execution up (the pickup scenario measures that).
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import Bench, Row, children, majordomus_worker, median, wait_for_workers
from majordomus.context import BATCH_EVENTS
from majordomus.engine import Engine
from majordomus.states import FINAL
from majordomus.store.keys import Keys

GOAL_RATIO = 0.5


async def _ours(engine: Engine, events: int) -> tuple[float, bytes]:
    """One `bench.emit` run: its events per second, and one of its progress envelopes."""
    started = await engine.start("bench.emit", {"events": events})
    await _until_final(engine, started.id)
    final = await engine.get(started.id)
    if final.state != "succeeded" or not isinstance(final.duration_ms, int):
        raise RuntimeError(f"bench.emit ended {final.state}: {final.error}")
    stream = Keys(engine.settings.key_prefix).events(started.id)
    entries = await engine.redis.xrevrange(stream, "+", "-", count=2)
    # The newest entry is the terminal event; the one before it the last progress report.
    envelope = entries[-1][1][b"e"]
    return events / (max(final.duration_ms, 1) / 1000), envelope


async def _until_final(engine: Engine, execution_id: str, timeout: float = 60) -> None:
    """Poll the state, lightly: following the events (`engine.wait`) would make this process
    decode every one of them on a core the worker and Redis need."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await engine.store.states([execution_id]))[0] in FINAL:
            return
        await asyncio.sleep(0.005)
    raise RuntimeError(f"{execution_id} did not finish within {timeout}s")


async def _raw(bench: Bench, events: int, payload: bytes) -> float:
    """Raw pipelined XADDs into a bare stream capped at 500: events per second."""
    client = bench.redis()
    key = f"{bench.prefix}:bench:raw-events"
    try:
        await client.delete(key)
        t0 = time.perf_counter()
        for start in range(0, events, BATCH_EVENTS):
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(min(BATCH_EVENTS, events - start)):
                    pipe.xadd(key, {"e": payload}, maxlen=500, approximate=False)
                await pipe.execute()
        elapsed = time.perf_counter() - t0
        await client.delete(key)
    finally:
        await client.aclose()
    return events / elapsed


async def run(bench: Bench) -> list[Row]:
    events = bench.size(50_000, 2_000)
    runs = bench.size(5, 3)
    ours: list[float] = []
    raw: list[float] = []
    with children() as kids:
        kids.append(majordomus_worker(bench, max_jobs=1))
        await wait_for_workers(bench, 1)
        async with bench.engine() as engine:
            # A first, small execution warms the worker (imports, script loading).
            _, envelope = await _ours(engine, 300)
            for _ in range(runs):
                rate, envelope = await _ours(engine, events)
                ours.append(rate)
                raw.append(await _raw(bench, events, envelope))
    ours_rate, raw_rate = median(ours), median(raw)
    bench.note(
        f"events: {events:,} progress reports per run, median of {runs} runs each; ours from "
        "execution.started to the terminal append (every report written), each event a "
        "stream entry + a feed entry + a snapshot fold in one Lua call per "
        f"{BATCH_EVENTS}; raw: one XADD MAXLEN 500 per event, pipelines of {BATCH_EVENTS}, "
        f"entries of {len(envelope)} bytes (our progress envelope's size). The raw figure is "
        "what redis-py's asyncio pipeline reaches: its per-command work in the client bounds "
        "it, not Redis (an XADD takes Redis under 2 us)."
    )
    return [
        Row(
            "events",
            "events/s one handler writes",
            ours_rate,
            "events/s",
            baseline=raw_rate,
            baseline_name=f"raw pipelined XADD (x{BATCH_EVENTS})",
            goal=f">= {GOAL_RATIO}x raw",
            met=ours_rate >= GOAL_RATIO * raw_rate,
        )
    ]
