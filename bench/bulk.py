"""Bulk cancel: `executions.cancel_matching` over 10,000 queued executions, whole and
interrupted.

    python -m bench.bulk                  # 10,000 executions
    python -m bench.bulk --executions 2000

Whole: 10,000 executions of `bench.noop` due in an hour (queued, in the delayed set) are
cancelled by one `executions.cancel_matching` (filter: the capability) on one majordomus
worker process; the figure is from its start to its `succeeded`, read from its snapshot
(`started_at` to `finished_at`, the walk alone) and from the caller's side (start to the
answer of its wait).

Interrupted: as many again; the worker running the action is killed (SIGKILL) once its
progress shows its first page done; then, with a new worker, the same filter again: the
figure is the time of that second run, which passes by what the first did and cancels the
rest. The run checks that every execution ends cancelled, each with one terminal event.
(The killed run's own execution is also started again by the sweeper once its worker's
lease lapses, and finds the rest done or does part of it: both are the same filter.)

The baseline is the same executions cancelled by `Engine.cancel` one after another from
one client: what a script without the bulk action would do.

Scenario `bulk` of `python -m bench`. Redis: as `python -m bench` finds it; the database
is flushed first.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bench.harness import Bench, Row, children, majordomus_worker, wait_for_workers, workdir
from majordomus.engine import Engine
from majordomus.matching import Match
from majordomus.start_options import StartOptions

SCENARIO = "bulk"
EXECUTIONS = 10_000
FILTER = {"capability": "bench.noop"}


def _epoch_ms(stamp: Any) -> float:
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() * 1000


async def _seed(engine: Engine, n: int) -> list[str]:
    later = StartOptions(start_at_ms=int(time.time() * 1000) + 3_600_000)
    ids: list[str] = []
    for begin in range(0, n, 500):
        started = await asyncio.gather(
            *(
                engine.start("bench.noop", {}, options=later)
                for _ in range(begin, min(n, begin + 500))
            )
        )
        ids += [s.id for s in started]
    return ids


async def _all_cancelled_once(engine: Engine, ids: list[str]) -> bool:
    rows = await engine.store.snapshot_fields(ids, ["state", "last_seq"])
    return all(row == [b"cancelled", b"3"] for row in rows)


async def _progressed(engine: Engine, execution_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = await engine.get(execution_id)
        if snap.progress and getattr(snap.progress, "current", 0) > 0:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the bulk action showed no progress")


async def _beating_since(engine: Engine, since_ms: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await engine.workers_beating(since_ms):
        if time.monotonic() > deadline:
            raise RuntimeError("the new worker did not report")
        await asyncio.sleep(0.05)


async def run(bench: Bench, executions: int | None = None) -> list[Row]:
    n = executions or bench.size(EXECUTIONS, 600)
    async with bench.engine() as engine:
        # Whole.
        ids = await _seed(engine, n)
        with children() as started:
            started.append(majordomus_worker(bench))
            await wait_for_workers(bench, 1)
            t0 = time.monotonic()
            bulk = await engine.start("executions.cancel_matching", FILTER)
            done = await engine.wait(bulk.id, 600_000)
            whole_s = time.monotonic() - t0
        assert done.state == "succeeded", done
        walk_s = (_epoch_ms(done.finished_at) - _epoch_ms(done.started_at)) / 1000
        assert await _all_cancelled_once(engine, ids), "an execution was not cancelled once"
        bench.note(f"bulk: {n} cancelled by one cancel_matching: {done.output}")

        # Interrupted, then the same filter again.
        await bench.flush()
        ids = await _seed(engine, n)
        with children() as started:
            first = majordomus_worker(bench)
            started.append(first)
            await wait_for_workers(bench, 1)
            bulk = await engine.start("executions.cancel_matching", FILTER)
            await _progressed(engine, bulk.id)
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(10)
            killed_ms = int(time.time() * 1000)
            left = (await engine.count(Match(capability="bench.noop"))).cancellable
            started.append(majordomus_worker(bench))
            await _beating_since(engine, killed_ms)  # the new one (the killed one beats no more)
            t0 = time.monotonic()
            again = await engine.start("executions.cancel_matching", FILTER)
            rest = await engine.wait(again.id, 600_000)
            rest_s = time.monotonic() - t0
            assert rest.state == "succeeded", rest
            assert await _all_cancelled_once(engine, ids), "an execution was not cancelled once"
        bench.note(
            f"bulk: killed after its first page with {left} of {n} left; the same filter "
            f"again: {rest.output}"
        )

        # The baseline: one cancel after another, from one client.
        await bench.flush()
        ids = await _seed(engine, n)
        t0 = time.monotonic()
        for execution_id in ids:
            await engine.cancel(execution_id, by="internal")
        one_by_one_s = time.monotonic() - t0

    baseline = f"{n:,} Engine.cancel one after another, one client"
    return [
        Row(SCENARIO, f"cancel_matching of {n:,} queued: start to answer", whole_s, "s",
            one_by_one_s, baseline, higher_is_better=False),
        Row(SCENARIO, f"cancel_matching of {n:,} queued: cancels/s of the walk", n / walk_s,
            "1/s", n / one_by_one_s, baseline),
        Row(SCENARIO, f"killed with {left:,} left, the same filter again: start to answer",
            rest_s, "s", one_by_one_s * left / n, f"{left:,} Engine.cancel one after another",
            higher_is_better=False),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=EXECUTIONS)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args(argv)
    bench = Bench(args.redis_url, quick=False, workdir=workdir())

    async def go() -> list[Row]:
        await bench.flush()
        return await run(bench, args.executions)

    for row in asyncio.run(go()):
        print(
            f"{row.metric}: {row.ours:.2f} {row.unit} (baseline {row.baseline:.2f}: {row.baseline_name})"
        )
    for note in bench.notes:
        print(note)


if __name__ == "__main__":
    sys.exit(main())
