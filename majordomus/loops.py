"""How a long-lived loop lives through failures, and how a task stops a task it started.

Every background loop of a process (a worker's poll loop, signal listener and beat, a
handler's report writer, the API's feed reader, the MCP episode keeper) meets the same
failure the same way when Redis goes away, so a person reading the log sees the same
three lines from each: the first failure with its traceback, "still failing (N times)" at
most every `STILL_FAILING_EVERY_SECONDS`, and "recovered after N failures". Between
attempts it waits an exponential, jittered, capped time (`Failures.pause`).

Each failure and each recovery is also counted for Prometheus, under the loop's name
(`majordomus_redis_errors_total{loop}`, `majordomus_redis_reconnects_total{loop}`):
`loop=` names it, or it is derived from the `what` of the log lines (`loop_name`).

This module neither retries a Redis command (the client does, `majordomus.store.connect`)
nor decides what a loop does once it failed; it only says so and paces the attempts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from majordomus.metrics import METRICS
from majordomus.store.failures import UNREACHABLE, StoreFailure

STILL_FAILING_EVERY_SECONDS = 30.0
"""How often a loop that keeps failing says so again (with its count), at most."""

BACKOFF_FIRST_SECONDS = 0.1
"""The wait after a loop's first failure (the ceiling of its jitter)."""

BACKOFF_CAP_SECONDS = 2.0
"""The longest wait between two attempts, however long the failures go on (a loop that
matters sooner passes a smaller cap)."""

RECANCEL_SECONDS = 0.5
"""How long `stop_task` waits for a cancelled task to end before cancelling it again."""


def loop_name(what: str) -> str:
    """A loop's metric label from how its log lines name it: "the worker's poll loop" is
    `worker_poll_loop`, "the lease renewal (beat)" `lease_renewal`."""
    text = re.sub(r"\(.*?\)|'s\b", "", what.lower())
    text = re.sub(r"^the\s+", "", text.strip())
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_") or "loop"


class Failures:
    """The failures of one loop in a row: said once, counted, paced, and ended.

    `failed(exc)` after each failed attempt, `await pause()` before the next, and
    `recovered()` after one that worked (it says so only if there had been failures).
    `first` and `cap` bound the backoff; `traceback=False` keeps the first line short, for
    a loop of which there are many (one report writer per execution) whose outage the
    process's own loops already show in full. `loop` is its name in the metrics (bounded:
    never an id); by default `loop_name(what)`. `fields` go with each of its lines as
    `extra=` (an execution's `execution_id`: a field of the JSON log, `majordomus.logs`).
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
        loop: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        self.log = log
        self.fields = fields
        self.loop = loop or loop_name(what)
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
        if isinstance(exc, StoreFailure):  # a fault of the loop's own is not Redis's
            METRICS.redis_errors.labels(self.loop).inc()
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
                extra=self.fields,
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
                extra=self.fields,
            )
            self._said_at = now
            self._said_count = self.count

    def recovered(self) -> None:
        if not self.count:
            return
        METRICS.redis_reconnects.labels(self.loop).inc()
        self.log.info(
            "%s recovered after %d failures in %.1fs",
            self.what,
            self.count,
            self.for_seconds,
            extra=self.fields,
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


async def within(seconds: float | None, awaitable: Awaitable[Any]) -> bool:
    """Await `awaitable` for at most `seconds` (None: no bound): True when it ended in time,
    False when the time ran out (it is cancelled then).

    What `asyncio.wait_for` is for, with the caller's cancel kept: on Python 3.11 `wait_for`
    returns the result of an awaitable done as the cancel landed and drops the cancel (an
    event set by the very task being stopped, a write completing), and the loop cancelled
    goes on. Every bounded wait of the project's code is this one (tests/test_layout.py).
    """
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        return False
    return True


async def stop_task(task: asyncio.Task[Any] | None, log: logging.Logger | None = None) -> None:
    """Cancel `task` (a child of the caller) and wait until it has ended.

    The cancel is repeated every `RECANCEL_SECONDS` until the child ends, because a library
    can lose one (Python 3.11's `asyncio.wait_for`, see `within`; redis-py 5.3 used it for
    every write until `majordomus.store.connect` wrote otherwise), and a loop that lost its
    cancel goes on as if nothing had been asked. The child's own cancellation is what was asked for and ends quietly; a
    failure it ended with is logged, not raised. The caller's cancellation is never
    swallowed: if the caller is cancelled while it waits, `CancelledError` goes on up (the
    child was asked to stop all the same).
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=RECANCEL_SECONDS)
    if task.cancelled():
        return
    failure = task.exception()
    if failure is not None:
        (log or logging.getLogger("majordomus")).warning(
            "task %s ended with a failure while stopping", task.get_name(), exc_info=failure
        )
