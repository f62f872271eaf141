"""The capabilities the benchmarks run: loaded by the run's workers and API, nowhere else.

`bench.noop` does nothing (the floor of an execution's cost: its four lifecycle events);
`bench.emit` reports progress in a tight loop (the event rate one handler reaches);
`bench.hold` waits until it is cancelled or its time passes (live-delivery subjects).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec

from majordomus.context import Context
from majordomus.registry import capability

Count = Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]


class NoInput(msgspec.Struct, forbid_unknown_fields=True):
    pass


class Done(msgspec.Struct):
    ok: bool = True


@capability(
    "bench.noop",
    input=NoInput,
    output=Done,
    title="No-op",
    description="Does nothing; the floor of an execution.",
)
async def noop(ctx: Context, value: NoInput) -> Done:
    return Done()


class EmitInput(msgspec.Struct, forbid_unknown_fields=True):
    events: Count = 1000
    """Progress reports to make, as fast as the handler can."""


class EmitOutput(msgspec.Struct):
    events: int
    elapsed_ms: float
    """From the first report to the last one written (the terminal event follows)."""


@capability(
    "bench.emit",
    input=EmitInput,
    output=EmitOutput,
    title="Emit progress",
    description="Reports progress in a tight loop; the event rate one handler reaches.",
)
async def emit(ctx: Context, value: EmitInput) -> EmitOutput:
    t0 = time.perf_counter()
    total = value.events
    for i in range(total):
        ctx.progress(i + 1, total)
        if i % 256 == 255:
            await asyncio.sleep(0)
    return EmitOutput(total, (time.perf_counter() - t0) * 1000)


class HoldInput(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 60


@capability(
    "bench.hold",
    input=HoldInput,
    output=Done,
    cancellable=True,
    title="Hold",
    description="Stays running until cancelled or its time passes.",
)
async def hold(ctx: Context, value: HoldInput) -> Done:
    deadline = time.monotonic() + value.seconds
    while time.monotonic() < deadline and not ctx.cancelled():
        await asyncio.sleep(0.05)
    return Done()
