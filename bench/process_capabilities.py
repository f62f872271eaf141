"""The capabilities of the `isolation` scenario: loaded by its workers alone
(`MAJORDOMUS_CAPABILITIES=bench.capabilities,bench.process_capabilities`), so no other
scenario's worker starts a child process.

No-ops, to weigh what running in a child costs beside the loop and a thread:
`bench.noop_process` (async, `runs_in="process"`, the twin of `bench.noop` in the loop),
`bench.noop_thread` (a plain `def` in a thread) and `bench.noop_def_process` (the same
plain `def` in a process).

Stuck handlers, each deaf to its cancel flag for `seconds` (a stopping worker's bound):
`bench.stuck_thread` and `bench.stuck_process` sleep in `time.sleep` (a thread, a child),
`bench.stuck_async` awaits `asyncio.sleep` in a loop that ignores `ctx.cancelled()` (a
task cancel still stops it). Each logs `stuck` first, so the scenario knows it is under way.

Leaks, each keeping `kib` KiB more per execution in a module-level list, every page written
so that it is resident: `bench.leak_process` in a child, `bench.leak_loop` in the worker's
own loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec

from bench.capabilities import Done, NoInput
from majordomus.context import Context
from majordomus.registry import capability

PAGE = 4096


@capability(
    "bench.noop_process",
    input=NoInput,
    output=Done,
    runs_in="process",
    title="No-op in a process",
    description="Does nothing, in a child process of the worker.",
)
async def noop_process(ctx: Context, value: NoInput) -> Done:
    return Done()


def _noop_def(ctx: Context, value: NoInput) -> Done:
    return Done()


@capability(
    "bench.noop_thread",
    input=NoInput,
    output=Done,
    title="No-op in a thread",
    description="A plain def that does nothing, in a thread of the worker.",
)
def noop_thread(ctx: Context, value: NoInput) -> Done:
    return _noop_def(ctx, value)


@capability(
    "bench.noop_def_process",
    input=NoInput,
    output=Done,
    runs_in="process",
    title="Plain no-op in a process",
    description="A plain def that does nothing, in a child process of the worker.",
)
def noop_def_process(ctx: Context, value: NoInput) -> Done:
    return _noop_def(ctx, value)


class StuckInput(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 60


def _stuck_def(ctx: Context, value: StuckInput) -> Done:
    ctx.log("stuck")
    time.sleep(value.seconds)  # deaf to its cancel flag
    return Done()


@capability(
    "bench.stuck_thread",
    input=StuckInput,
    output=Done,
    cancellable=True,
    title="Stuck in a thread",
    description="time.sleep(seconds) in a thread, deaf to its cancel flag.",
)
def stuck_thread(ctx: Context, value: StuckInput) -> Done:
    return _stuck_def(ctx, value)


@capability(
    "bench.stuck_process",
    input=StuckInput,
    output=Done,
    cancellable=True,
    runs_in="process",
    title="Stuck in a process",
    description="time.sleep(seconds) in a child process, deaf to its cancel flag.",
)
def stuck_process(ctx: Context, value: StuckInput) -> Done:
    return _stuck_def(ctx, value)


@capability(
    "bench.stuck_async",
    input=StuckInput,
    output=Done,
    cancellable=True,
    title="Stuck in the loop",
    description="Awaits asyncio.sleep until its time passes, deaf to its cancel flag.",
)
async def stuck_async(ctx: Context, value: StuckInput) -> Done:
    ctx.log("stuck")
    deadline = time.monotonic() + value.seconds
    while time.monotonic() < deadline:  # ctx.cancelled() never looked at
        await asyncio.sleep(0.05)
    return Done()


class LeakInput(msgspec.Struct, forbid_unknown_fields=True):
    kib: Annotated[int, msgspec.Meta(ge=0, le=1024 * 1024)] = 100


class Kept(msgspec.Struct):
    chunks: int
    """How many leaked chunks this process holds now."""


KEPT: list[bytearray] = []
"""What the leaking handlers never let go of (per process: a child's, or the worker's)."""


def _leak(kib: int) -> int:
    chunk = bytearray(kib * 1024)
    chunk[::PAGE] = b"\x01" * len(range(0, len(chunk), PAGE))  # every page written: resident
    KEPT.append(chunk)
    return len(KEPT)


@capability(
    "bench.leak_process",
    input=LeakInput,
    output=Kept,
    runs_in="process",
    title="Leak in a process",
    description="Keeps `kib` KiB more per execution, in a child process.",
)
async def leak_process(ctx: Context, value: LeakInput) -> Kept:
    return Kept(_leak(value.kib))


@capability(
    "bench.leak_loop",
    input=LeakInput,
    output=Kept,
    title="Leak in the loop",
    description="Keeps `kib` KiB more per execution, in the worker itself.",
)
async def leak_loop(ctx: Context, value: LeakInput) -> Kept:
    return Kept(_leak(value.kib))
