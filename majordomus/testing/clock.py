"""The virtual clock: the wall clock, plus the time a test skipped.

`VirtualClock.time()` is `time.time()` plus every skip so far, so time runs as usual
between skips (a start delayed by 50 ms still runs 50 ms later) and jumps ahead at each.
Installed with `majordomus.clock.use`, it is what majordomus reads for due times,
leases, ticks and timestamps, and what fakeredis reads for `TIME` and key expiry
(`majordomus.store.fake_clock`). It never goes back.

The loops that sleep until something is due (the ticker, the sweeper) sleep through it
(`majordomus.clock.sleep`): a skip wakes them, and a loop that was busy when the
clock skipped goes round once more before it sleeps again. `settled()` waits until every
such loop has gone round at the new time and is asleep again: the ticks that came due are
started and the sweeper's pass is done. Elapsed time (`time.monotonic()`, the event
loop's clock) is left alone: an await still takes as long as it takes.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass

from majordomus.loops import within


@dataclass
class _Sleeper:
    """One loop that sleeps through the clock: the skip it last woke for, and whether it
    is asleep now."""

    seen: int = -1
    asleep: bool = False


class VirtualClock:
    """The wall clock, skipped ahead by `advance`."""

    def __init__(self) -> None:
        self.offset = 0.0
        """Seconds skipped so far."""
        self.skips = 0
        """How many times the clock was skipped."""
        self._sleepers: weakref.WeakKeyDictionary[asyncio.Task[object], _Sleeper] = (
            weakref.WeakKeyDictionary()
        )
        self._skipped: asyncio.Event | None = None
        self._dozed: asyncio.Event | None = None

    def time(self) -> float:
        return time.time() + self.offset

    async def sleep(self, seconds: float, /) -> None:
        """Sleep `seconds`, or until the clock is skipped. A loop that was awake when it was
        skipped does not sleep: it goes round once more, at the new time."""
        task = asyncio.current_task()
        if task is None:
            await asyncio.sleep(seconds)
            return
        sleeper = self._sleepers.setdefault(task, _Sleeper())  # type: ignore[arg-type]
        if sleeper.seen < self.skips:
            sleeper.seen = self.skips
            await asyncio.sleep(0)
            return
        skipped = self._skip_event()
        sleeper.asleep = True
        self._doze_event().set()
        try:
            await within(max(0.0, seconds), skipped.wait())
        finally:
            sleeper.asleep = False
            sleeper.seen = self.skips

    def advance(self, seconds: float) -> None:
        """Skip `seconds` ahead, and wake the loops asleep on this clock."""
        if seconds < 0:
            raise ValueError(f"the clock never goes back (asked to skip {seconds} s)")
        self.offset += seconds
        self.skips += 1
        skipped, self._skipped = self._skipped, None
        if skipped is not None:
            skipped.set()

    async def settled(self, bound: float) -> bool:
        """Until every loop sleeping on this clock has gone round since the last skip and
        is asleep again (True), or `bound` seconds passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while not self._all_asleep():
            dozed = self._doze_event()
            dozed.clear()
            if self._all_asleep():
                break
            left = deadline - loop.time()
            if left <= 0 or not await within(left, dozed.wait()):
                return self._all_asleep()
        return True

    def _all_asleep(self) -> bool:
        return all(
            task.done() or (sleeper.asleep and sleeper.seen == self.skips)
            for task, sleeper in list(self._sleepers.items())
        )

    def _skip_event(self) -> asyncio.Event:
        if self._skipped is None:
            self._skipped = asyncio.Event()
        return self._skipped

    def _doze_event(self) -> asyncio.Event:
        if self._dozed is None:
            self._dozed = asyncio.Event()
        return self._dozed
