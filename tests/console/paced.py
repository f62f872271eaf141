"""A capability for the console's tests: log lines at a steady rate, to measure how fast the
page follows an execution that keeps emitting (loaded by the console tests' API and worker
through `MAJORDOMUS_CAPABILITIES`)."""

from __future__ import annotations

import asyncio
import time

import msgspec

from majordomus import Context, capability


class Pace(msgspec.Struct, forbid_unknown_fields=True):
    rate: int = 1000
    """Log lines a second."""
    seconds: float = 3.0


class Paced(msgspec.Struct):
    lines: int


@capability(
    "console.paced", input=Pace, output=Paced, title="Log at a steady rate", cancellable=True
)
async def paced(ctx: Context, inp: Pace) -> Paced:
    """Log `rate` lines a second for `seconds`, each due line on time (a tick every 5 ms)."""
    began = time.monotonic()
    total = int(inp.rate * inp.seconds)
    sent = 0
    while sent < total and not ctx.cancelled():
        due = min(total, int((time.monotonic() - began) * inp.rate) + 1)
        while sent < due:
            sent += 1
            ctx.log(f"line {sent} of {total}")
        await asyncio.sleep(0.005)
    return Paced(sent)
