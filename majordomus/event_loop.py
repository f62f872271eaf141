"""Which event loop a process runs on, and which HTTP parser its API speaks with: chosen once.

uvloop (an event loop on libuv) and httptools (Node's HTTP parser, for uvicorn) are the
optional extra `majordomus[fast]`. Where both are installed, `serve`, `dev` and `worker`
run on them, because they paid in the benchmarks (BENCHMARKS.md, "uvloop and httptools");
`MAJORDOMUS_FAST_LOOP=0` keeps the plain asyncio loop and uvicorn's h11. One installed
without the other is used alone. The choice is made once a process, from the setting and
what is importable, and each process says it in its start-up line.

uvloop's timers are made never to fire early: libuv counts whole milliseconds, rounds a
delay to one and drops the fraction of a millisecond already elapsed, so `asyncio.sleep(n)`
or a timeout could end up to about 1.5 ms before `n` had passed by `time.monotonic()` (as
a handler that measures its own sleep would see; uvloop issue 739). Each delay is set
`TIMER_PAD` later, as the fix proposed upstream does, so a timer ends at or after its time,
as on asyncio's loop.

This module neither runs a loop nor imports uvloop or httptools until a loop is made.
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass
from functools import cache
from typing import Any

FAST_EXTRA = 'pip install "majordomus[fast]"'
TIMER_PAD = 0.002
"""Seconds added to every uvloop timer's delay: more than the 1.5 ms it can be early."""


@dataclass(frozen=True)
class LoopChoice:
    """The event loop (`uvloop` or `asyncio`) and the HTTP parser (`httptools` or `h11`)."""

    loop: str
    http: str
    opted_out: bool = False
    """`MAJORDOMUS_FAST_LOOP=0`: the plain ones whatever is installed."""

    def new_loop(self) -> asyncio.AbstractEventLoop:
        if self.loop == "uvloop":
            return _never_early_uvloop()()
        return asyncio.new_event_loop()

    @property
    def why(self) -> str:
        """Why it is this pair: installed, opted out, or what is missing."""
        return self._why(("uvloop", "httptools"), (self.loop, self.http))

    @property
    def why_loop(self) -> str:
        """Why the loop is this one (a worker speaks no HTTP)."""
        return self._why(("uvloop",), (self.loop,))

    def _why(self, fast: tuple[str, ...], chosen: tuple[str, ...]) -> str:
        if self.opted_out:
            return "MAJORDOMUS_FAST_LOOP=0"
        missing = [name for name, used in zip(fast, chosen, strict=True) if name != used]
        if not missing:
            return "installed"
        return f"{' and '.join(missing)} not installed: {FAST_EXTRA}"


@cache
def _never_early_uvloop() -> type[asyncio.AbstractEventLoop]:
    """uvloop's loop with every timer set `TIMER_PAD` later (its `call_at` goes through
    `call_later`, so both are)."""
    import uvloop

    class NeverEarlyLoop(uvloop.Loop):
        def call_later(  # type: ignore[override]  # the same call, typed loosely
            self, delay: float, callback: Any, *args: Any, context: Any = None
        ) -> Any:
            if delay > 0:
                delay += TIMER_PAD
            return super().call_later(delay, callback, *args, context=context)

    return NeverEarlyLoop


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@cache
def choose(fast: bool) -> LoopChoice:
    """The choice for `MAJORDOMUS_FAST_LOOP` = `fast`, from what is installed (read once)."""
    if not fast:
        return LoopChoice("asyncio", "h11", opted_out=True)
    return LoopChoice(
        "uvloop" if _installed("uvloop") else "asyncio",
        "httptools" if _installed("httptools") else "h11",
    )


def running_loop_name() -> str:
    """`uvloop` or `asyncio`: what the running loop is, as a start-up line says it."""
    kinds = type(asyncio.get_running_loop()).__mro__
    return "uvloop" if any(k.__module__.startswith("uvloop") for k in kinds) else "asyncio"
