"""How a long-lived loop lives through failures, and how a task stops a task it started.

Every background loop of a process (a worker's poll loop, signal listener and beat, a
handler's report writer, the API's feed reader, the MCP episode keeper) meets the same
failure the same way when Redis goes away, so a person reading the log sees the same
three lines from each: the first failure with its traceback, "still failing (N times)" at
most every `STILL_FAILING_EVERY_SECONDS`, and "recovered after N failures". Between
attempts it waits an exponential, jittered, capped time (`Failures.pause`).

This module neither retries a Redis command (the client does, `majordomus.store.connect`)
nor decides what a loop does once it failed; it only says so and paces the attempts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from majordomus.store.failures import UNREACHABLE

STILL_FAILING_EVERY_SECONDS = 30.0
"""How often a loop that keeps failing says so again (with its count), at most."""

BACKOFF_FIRST_SECONDS = 0.1
"""The wait after a loop's first failure (the ceiling of its jitter)."""

BACKOFF_CAP_SECONDS = 2.0
"""The longest wait between two attempts, however long the failures go on (a loop that
matters sooner passes a smaller cap)."""


class Failures:
    """The failures of one loop in a row: said once, counted, paced, and ended.

    `failed(exc)` after each failed attempt, `await pause()` before the next, and
    `recovered()` after one that worked (it says so only if there had been failures).
    `first` and `cap` bound the backoff; `traceback=False` keeps the first line short, for
    a loop of which there are many (one report writer per execution) whose outage the
    process's own loops already show in full.
    """

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        every: float = STILL_FAILING_EVERY_SECONDS,
        first: float = BACKOFF_FIRST_SECONDS,
        cap: float = BACKOFF_CAP_SECONDS,
        traceback: bool = True,
    ) -> None:
        self.log = log
        self.traceback = traceback
        self.what = what
        self.every = every
        self.first = first
        self.cap = cap
        self.count = 0
        self.since: float | None = None
        """When the first failure of this run happened (`time.monotonic()`), or None."""
        self._said_at = 0.0
        self._said_count = 0

    @property
    def failing(self) -> bool:
        return self.count > 0

    @property
    def for_seconds(self) -> float:
        """How long this run of failures has lasted (0 when not failing)."""
        return 0.0 if self.since is None else time.monotonic() - self.since

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self.count += 1
        # An outage is expected to pass (a warning); anything else is a fault (an error).
        level = logging.WARNING if isinstance(exc, UNREACHABLE) else logging.ERROR
        if self.count == 1:
            self.since = self._said_at = now
            self._said_count = 1
            self.log.log(
                level,
                "%s failed: %s; retrying",
                self.what,
                _text(exc),
                exc_info=exc if self.traceback else None,
            )
            return
        if now - self._said_at >= self.every:
            self.log.log(
                level,
                "%s still failing (%d times in %.0fs, %d since last said): %s",
                self.what,
                self.count,
                now - (self.since or now),
                self.count - self._said_count,
                _text(exc),
            )
            self._said_at = now
            self._said_count = self.count

    def recovered(self) -> None:
        if not self.count:
            return
        self.log.info(
            "%s recovered after %d failures in %.1fs", self.what, self.count, self.for_seconds
        )
        self.count = 0
        self.since = None

    def backoff(self) -> float:
        """The wait before the next attempt: up to first * 2**(failures - 1), at most the
        cap, and at least half of that ceiling (so a loop never spins)."""
        ceiling = min(self.cap, self.first * 2 ** max(0, min(self.count - 1, 30)))
        return random.uniform(ceiling / 2, ceiling)

    async def pause(self) -> None:
        await asyncio.sleep(self.backoff())


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def stop_task(task: asyncio.Task[Any] | None, log: logging.Logger | None = None) -> None:
    """Cancel `task` (a child of the caller) and wait until it has ended.

    The child's own cancellation is what was asked for and ends quietly; a failure it
    ended with is logged, not raised. The caller's cancellation is never swallowed: if
    the caller is cancelled while it waits, `CancelledError` goes on up. (A caller already
    being cancelled, stopping its children in a `finally`, gets its own cancellation
    back when that block ends, as always.)
    """
    if task is None:
        return
    me = asyncio.current_task()
    cancels_before = me.cancelling() if me is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if me is not None and me.cancelling() > cancels_before:
            raise
    except Exception:
        (log or logging.getLogger("majordomus")).warning(
            "task %s ended with a failure while stopping", task.get_name(), exc_info=True
        )
