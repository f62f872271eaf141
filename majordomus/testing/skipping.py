"""Skipping time: the clock moved ahead stop by stop, everything due at each stop let run.

A skip of an hour is not one jump of an hour: the clock stops at every moment within it
when something comes due, in order, so that what happens at one moment (a tick started, an
attempt failed and its retry scheduled, a dead worker's execution failed) is there before
the next, as it would have been had the hour passed. The moments are read from the store:
the first due time of the queue's delayed sets, the next tick of every active schedule,
when a killed worker's lease and (held by a killed worker) the sweeper's lock run out. At
each stop:

1. the live workers' leases and concurrency slots are carried over the time skipped, as
   their beats would have kept them all along (`SkipStore.carry_over`), then the clock
   skips and each live worker beats at the new time (its own `beat`);
2. the loops that sleep on the clock (every ticker and sweeper) wake, and go round at the
   new time: due ticks are started, dead workers' executions failed;
3. the idle workers are woken as a start wakes them, and take what came due (`take.lua`,
   by the server's `TIME`: the virtual clock's);
4. the executions they took run to their end, one that runs on past `settle_seconds`
   being left running (a long runner: never waited for again).

The scripts, the worker, the ticker and the sweeper decide everything, as in production;
this module only chooses where the clock stops and waits until things are quiet there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.schedules import next_tick_ms
from majordomus.store.schedules import ScheduleStore
from majordomus.store.testing import SkipStore
from majordomus.testing.clock import VirtualClock
from majordomus.testing.workers import InProcessWorker

log = logging.getLogger("majordomus.testing")

SETTLE_BOUND_SECONDS = 30.0
"""The longest one stop waits to be quiet (a stop that does not settle is said in the log,
and the skip goes on)."""

POKE_SECONDS = 0.05
"""How often idle workers are woken again while due work waits."""

POLL_SECONDS = 0.002
"""How often a stop looks again whether it is quiet."""

MARGIN_SECONDS = 0.0005
"""A stop is this much after its moment, so the server's millisecond is the moment's."""


class Skipper:
    """The skips of one environment."""

    def __init__(
        self,
        clock: VirtualClock,
        engine: Engine,
        workers: Callable[[], list[InProcessWorker]],
        settle_seconds: float,
    ) -> None:
        self.clock = clock
        self.engine = engine
        self.workers = workers
        self.settle_seconds = settle_seconds
        self.store = SkipStore(engine.redis, engine.settings)
        self.schedules = ScheduleStore(engine.redis, engine.settings)
        self.long_runners: set[str] = set()
        """Executions seen running longer than `settle_seconds`: no stop waits for them."""
        self.stops = 0
        """How many times the clock stopped (every skip counted)."""
        self._first_seen: dict[str, float] = {}

    async def skip(self, seconds: float) -> None:
        """Skip `seconds` ahead, stopping at every moment something comes due."""
        if seconds < 0:
            raise ValueError(f"time never goes back (asked to skip {seconds} s)")
        target = self.clock.time() + seconds
        while True:
            now = self.clock.time()
            moment = await self._next_moment(now)
            stop = target if moment is None or moment >= target else moment
            if stop > now:
                await self._jump(stop - now)
            self.stops += 1
            await self.settle()
            if stop >= target:
                return

    # -- where to stop ------------------------------------------------------------------

    async def _next_moment(self, now: float) -> float | None:
        """The first moment after `now` at which something comes due, if any."""
        moments: list[float] = []
        due_ms = await self.store.next_due_ms()
        if due_ms is not None:
            moments.append(due_ms / 1000)
        if self._alive():  # no ticker runs without a live worker
            moments += await self._ticks()
        moments += await self._lapses(now)
        later = [m + MARGIN_SECONDS for m in moments if m + MARGIN_SECONDS > now]
        return min(later) if later else None

    async def _ticks(self) -> list[float]:
        """The next tick of every active schedule a worker here runs."""
        registry = self.engine.registry
        _, stored = await self.schedules.every()
        ticks: list[float] = []
        for schedule in stored:
            d = schedule.definition
            if schedule.paused or d.capability not in registry:
                continue
            with contextlib.suppress(MajordomusError):  # a zone this process lacks
                ticks.append(next_tick_ms(d.cron, d.timezone, schedule.cursor_ms) / 1000)
        return ticks

    async def _lapses(self, now: float) -> list[float]:
        """When the killed workers' leases run out, and the sweeper's lock if one of them
        holds it (the other candidates take it over then)."""
        killed = [w.id for w in self.workers() if w.killed and w.id is not None]
        if not killed:
            return []
        lapses = [
            now + (left + 1) / 1000
            for left in await self.store.lease_left_ms(killed)
            if left is not None
        ]
        holder, left = await self.store.sweeper_lock()
        if holder is not None and left is not None:
            if any(holder.startswith(f"worker:{worker_id}:") for worker_id in killed):
                lapses.append(now + (left + 1) / 1000)
        return lapses

    # -- one stop -----------------------------------------------------------------------

    async def _jump(self, seconds: float) -> None:
        """Carry the live workers' leases and slots over `seconds`, skip, and have each
        beat at the new time."""
        alive = self._alive()
        slots = [
            (run.capability, execution_id)
            for w in alive
            if w.runtime is not None
            for execution_id, run in w.runtime.running.items()
            if run.slot
        ]
        ids = [w.id for w in alive if w.id is not None]
        if ids:
            skip_ms = int(seconds * 1000) + 1
            await self.store.carry_over(ids, slots, skip_ms, int(self.clock.time() * 1000))
        self.clock.advance(seconds)
        for w in alive:
            if w.runtime is not None:
                with contextlib.suppress(Exception):  # its own beat loop tries again
                    await w.runtime.beat()

    async def settle(self) -> None:
        """Until the loops on the clock went round, nothing due waits in the queue while a
        worker has room, and what the workers took has ended (but for long runners)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_BOUND_SECONDS
        poked_at: float | None = None
        while True:
            calm = await self.clock.settled(max(0.0, deadline - loop.time()))
            alive = self._alive()
            due = 0
            if any(w.has_room for w in alive):
                due = await self.store.due_waiting(int(self.clock.time() * 1000))
            running = await self._running(alive)
            if calm and not due and not running:
                return
            if loop.time() >= deadline:
                log.warning(
                    "a skip's stop did not settle in %.0f s (loops asleep: %s, due waiting: "
                    "%d, running: %s); going on",
                    SETTLE_BOUND_SECONDS,
                    calm,
                    due,
                    ", ".join(running) or "none",
                )
                return
            if due and (poked_at is None or loop.time() - poked_at >= POKE_SECONDS):
                await self._wake(alive)
                poked_at = loop.time()
            await asyncio.sleep(POLL_SECONDS)

    async def _wake(self, alive: list[InProcessWorker]) -> None:
        """Wake the live workers as a start does: the list a worker waits on in Redis, and
        the signal one waiting here hears."""
        for w in alive:
            if w.runtime is not None:
                w.runtime.wake.set()
        await self.store.wake_workers(len(alive))

    async def _running(self, alive: list[InProcessWorker]) -> list[str]:
        """The executions the live workers hold (in Redis: taken, not ended), but for the
        long runners."""
        ids = [w.id for w in alive if w.id is not None]
        held = {x for xs in await self.engine.store.held_by(ids) for x in xs} if ids else set()
        now = asyncio.get_running_loop().time()
        self._first_seen = {x: self._first_seen.get(x, now) for x in held}
        for execution_id, since in self._first_seen.items():
            if now - since > self.settle_seconds:
                self.long_runners.add(execution_id)
        return sorted(held - self.long_runners)

    def _alive(self) -> list[InProcessWorker]:
        return [w for w in self.workers() if w.alive]
