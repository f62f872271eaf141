"""The capabilities the benchmarks run: loaded by the run's workers and API, nowhere else.

`bench.noop` does nothing (the floor of an execution's cost: its four lifecycle events);
`bench.emit` reports progress in a tight loop (the event rate one handler reaches);
`bench.hold` waits until it is cancelled or its time passes (live-delivery subjects);
`bench.stamp` is a no-op that answers when its handler began (epoch seconds), for pick-up
measured on the worker's side as the peers' jobs measure it (`bench.peers`);
`bench.paced` logs at a steady rate, each line the wall-clock time it was made at (the
console's update latency, `bench.console`); `bench.noop_secret` is a no-op whose input holds
a `Secret` (a worker-only input, sealed with `MAJORDOMUS_ENCRYPTION_KEYS`: `bench.sealing`);
`bench.per_tenant` runs at most two of a tenant at once and `bench.any_tenant` is the same
without that limit; `bench.rated`, `bench.throttled` and `bench.debounced` carry the other
controls (`bench.flow`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec

from majordomus import Debounce, PerKey, RateLimit, Secret, Throttle
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


class SecretInput(msgspec.Struct, forbid_unknown_fields=True):
    token: Secret


@capability(
    "bench.noop_secret",
    input=SecretInput,
    output=Done,
    title="No-op with a secret",
    description="Does nothing with a secret input; what sealing it costs.",
)
async def noop_secret(ctx: Context, value: SecretInput) -> Done:
    return Done()


class Stamp(msgspec.Struct):
    started: float
    """time.time() as the handler began."""


@capability(
    "bench.stamp",
    input=NoInput,
    output=Stamp,
    title="Stamp",
    description="Does nothing but answer when it began; pick-up seen from the worker.",
)
async def stamp(ctx: Context, value: NoInput) -> Stamp:
    return Stamp(time.time())


class EmitInput(msgspec.Struct, forbid_unknown_fields=True):
    events: Count = 1000
    """Progress reports to make, as fast as the handler can."""


class EmitOutput(msgspec.Struct):
    events: int
    elapsed_ms: float
    """From the first report to the last one written (the terminal event follows)."""
    began: float = 0.0
    """time.time() as the handler began (`bench.audience`'s start latency, to the
    microsecond where the stored `started_at` has milliseconds)."""


@capability(
    "bench.emit",
    input=EmitInput,
    output=EmitOutput,
    title="Emit progress",
    description="Reports progress in a tight loop; the event rate one handler reaches.",
)
async def emit(ctx: Context, value: EmitInput) -> EmitOutput:
    began = time.time()
    t0 = time.perf_counter()
    total = value.events
    for i in range(total):
        ctx.progress(i + 1, total)
        if i % 256 == 255:
            await asyncio.sleep(0)
    return EmitOutput(total, (time.perf_counter() - t0) * 1000, began)


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


class PacedInput(msgspec.Struct, forbid_unknown_fields=True):
    rate: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1000
    """Log lines a second."""
    seconds: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 5


@capability(
    "bench.paced",
    input=PacedInput,
    output=Done,
    cancellable=True,
    title="Log at a steady rate",
    description="Logs `rate` lines a second, each its own send time (time.time(), as text).",
)
async def paced(ctx: Context, value: PacedInput) -> Done:
    # Each due line is made on time, on a tick every 5 ms; its text is taken just before
    # its append, so a reader's latency includes everything after the handler.
    began = time.monotonic()
    total = int(value.rate * value.seconds)
    sent = 0
    while sent < total and not ctx.cancelled():
        due = min(total, int((time.monotonic() - began) * value.rate) + 1)
        while sent < due:
            sent += 1
            ctx.log(repr(time.time()))
        await asyncio.sleep(0.005)
    return Done()


class TenantInput(msgspec.Struct, forbid_unknown_fields=True):
    tenant: str
    seconds: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.0


@capability(
    "bench.per_tenant",
    input=TenantInput,
    output=Done,
    title="Two at a time per tenant",
    description="Sleeps `seconds` (0: a no-op), at most two of a tenant at once (`bench.flow`).",
    per_key=PerKey("tenant", 2),
)
async def per_tenant(ctx: Context, value: TenantInput) -> Done:
    if value.seconds:
        await asyncio.sleep(value.seconds)
    return Done()


@capability(
    "bench.any_tenant",
    input=TenantInput,
    output=Done,
    title="Any tenant, no limit",
    description="`bench.per_tenant` without its limit per key: the baseline of `bench.flow`.",
)
async def any_tenant(ctx: Context, value: TenantInput) -> Done:
    if value.seconds:
        await asyncio.sleep(value.seconds)
    return Done()


@capability(
    "bench.rated",
    input=TenantInput,
    output=Done,
    title="Rate-limited, never reached",
    description="A rate limit of a million a second: what checking a limit costs (`bench.flow`).",
    rate_limit=RateLimit(1_000_000),
)
async def rated(ctx: Context, value: TenantInput) -> Done:
    return Done()


@capability(
    "bench.throttled",
    input=TenantInput,
    output=Done,
    title="Throttled per tenant",
    description="One execution a minute per tenant: what a throttle costs (`bench.flow`).",
    collapse=Throttle("tenant", 60),
)
async def throttled(ctx: Context, value: TenantInput) -> Done:
    return Done()


@capability(
    "bench.debounced",
    input=TenantInput,
    output=Done,
    title="Debounced per tenant",
    description="Runs once a tenant is quiet for 1 ms: what a debounce costs (`bench.flow`).",
    collapse=Debounce("tenant", 0.001),
)
async def debounced(ctx: Context, value: TenantInput) -> Done:
    return Done()
