"""The one clock majordomus reads the time of day from, and the store's timestamps.

Every due time, lease, tick and timestamp is read through `now()` (`now_ms()`,
`now_stamp()`), and the loops that sleep until one is due (the ticker, the sweeper) sleep
through `sleep()`. In every process this is the wall clock: `time.time()` and
`asyncio.sleep()`. `use()` puts another clock in its place for the whole process: the
testing kit's virtual clock (`majordomus.testing.clock`), which runs ahead of the wall
clock when a test skips time and wakes the sleeps it skipped past, while fakeredis reads
the same clock for `TIME` and key expiry (`majordomus.store.fake_clock`). Nothing reads
which clock is in use: the scripts and the code that decide what is due run the same on
both.

Elapsed time is not read here: bounds, timeouts, graces and backoffs (`time.monotonic()`,
the event loop's clock) last as long under either clock.

Timestamps are RFC 3339 UTC with milliseconds, beside epoch milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """What a clock answers: the time of day (epoch seconds), and a sleep of `seconds`."""

    def time(self) -> float: ...

    def sleep(self, seconds: float, /) -> Awaitable[None]: ...


class WallClock:
    """The clock of every process: the system's time, and asyncio's sleep."""

    time = staticmethod(time.time)

    @staticmethod
    def sleep(seconds: float, /) -> Awaitable[None]:
        # asyncio is imported here, not with this module: `majordomus --help` reads
        # timestamps (ids, the built-ins' declarations) and runs no event loop.
        import asyncio

        return asyncio.sleep(seconds)


WALL: Clock = WallClock()

_clock: Clock = WALL
_now: Callable[[], float] = WALL.time


def use(clock: Clock) -> Clock:
    """Read the time from `clock` from now on, in this whole process; answers the clock in
    use before (give it back to `use` to restore it)."""
    global _clock, _now
    previous = _clock
    _clock, _now = clock, clock.time
    return previous


def in_use() -> Clock:
    """The clock in use (`WALL` unless a test put another in its place)."""
    return _clock


def now() -> float:
    """The time of day, epoch seconds."""
    return _now()


def now_ms() -> int:
    """The time of day, epoch milliseconds."""
    return int(_now() * 1000)


def sleep(seconds: float) -> Awaitable[None]:
    """Sleep `seconds` (`asyncio.sleep`), for a loop that waits until something is due: a
    virtual clock wakes it early when a test skips time."""
    return _clock.sleep(seconds)


def now_stamp() -> tuple[str, int]:
    """The current time as RFC 3339 UTC with milliseconds, and as epoch milliseconds."""
    ms = int(_now() * 1000)
    seconds, millis = divmod(ms, 1000)
    return f"{second_stamp(seconds)}.{millis:03d}Z", ms


_SECOND: tuple[int, str] = (-1, "")


def second_stamp(seconds: int) -> str:
    """Epoch seconds as `YYYY-MM-DDTHH:MM:SS` (UTC). Every write stamps one or two events,
    and a start with nothing before it pays for the calendar in full (tens of microseconds
    with the caches cold, on the path of a start to its worker): the last second's text
    is kept, so the writes of one second format it once."""
    global _SECOND
    last, text = _SECOND
    if seconds != last:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _SECOND = (seconds, text)  # one tuple: a thread reads the pair or the one before
    return text


def stamp_of(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds (the store's timestamps)."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"
