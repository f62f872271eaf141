"""Capabilities the test suite declares, loaded in-process and by worker subprocesses
(`MAJORDOMUS_CAPABILITIES=tests.capabilities`)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec

from majordomus import (
    Context,
    Debounce,
    MajordomusError,
    PerKey,
    RateLimit,
    Secret,
    Throttle,
    capability,
)


class Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class Done(msgspec.Struct):
    ok: bool = True


@capability("tests.noop", input=Empty, output=Done, title="Do nothing")
async def noop(ctx: Context, inp: Empty) -> Done:
    return Done()


class Sleep(msgspec.Struct, forbid_unknown_fields=True):
    seconds: float = 5.0


class Slept(msgspec.Struct):
    slept: float


@capability("tests.sleepy", input=Sleep, output=Slept, title="Sleep, honouring cancel", cancellable=True)
async def sleepy(ctx: Context, inp: Sleep) -> Slept:
    began = time.monotonic()
    ctx.step("sleep", "Sleeping")
    await ctx.sleep(inp.seconds)
    ctx.raise_if_cancelled()
    ctx.step_done("sleep")
    return Slept(time.monotonic() - began)


@capability("tests.stubborn", input=Sleep, output=Slept, title="Sleep, ignoring cancel")
async def stubborn(ctx: Context, inp: Sleep) -> Slept:
    began = time.monotonic()
    await asyncio.sleep(inp.seconds)
    return Slept(time.monotonic() - began)


@capability(
    "tests.finisher",
    input=Sleep,
    output=Slept,
    title="Return output even when cancelled",
    cancellable=True,
)
async def finisher(ctx: Context, inp: Sleep) -> Slept:
    await ctx.sleep(inp.seconds)
    return Slept(inp.seconds)


@capability("tests.serial", input=Sleep, output=Slept, title="One at a time", max_concurrency=1)
async def serial(ctx: Context, inp: Sleep) -> Slept:
    await asyncio.sleep(inp.seconds)
    return Slept(inp.seconds)


class TenantWork(msgspec.Struct, forbid_unknown_fields=True):
    tenant: str | None = None
    seconds: float = 0.05


@capability(
    "tests.per_tenant",
    input=TenantWork,
    output=Slept,
    title="Two at a time per tenant",
    per_key=PerKey("tenant", 2),
    cancellable=True,
)
async def per_tenant(ctx: Context, inp: TenantWork) -> Slept:
    await ctx.sleep(inp.seconds)
    return Slept(inp.seconds)


@capability(
    "tests.per_tenant_capped",
    input=TenantWork,
    output=Slept,
    title="One at a time per tenant, three in all",
    per_key=PerKey("tenant", 1),
    max_concurrency=3,
)
async def per_tenant_capped(ctx: Context, inp: TenantWork) -> Slept:
    await asyncio.sleep(inp.seconds)
    return Slept(inp.seconds)


@capability("tests.rated", input=Empty, output=Done, title="Fifty a second", rate_limit=RateLimit(50))
async def rated(ctx: Context, inp: Empty) -> Done:
    return Done()


@capability(
    "tests.rated_per_tenant",
    input=TenantWork,
    output=Slept,
    title="Two a second per tenant",
    rate_limit=RateLimit(2, "second", key="tenant"),
)
async def rated_per_tenant(ctx: Context, inp: TenantWork) -> Slept:
    return Slept(0)


class Credentials(msgspec.Struct, forbid_unknown_fields=True):
    user: str
    token: Secret
    password: str = "not-a-secret-by-name"
    pin: Annotated[str, msgspec.Meta(extra_json_schema={"format": "password"})] = ""
    key: Annotated[str, msgspec.Meta(extra_json_schema={"writeOnly": True})] = ""
    tokens: list[Secret] = []
    vault: dict[str, Secret] = {}
    maybe: Secret | None = None


class Echo(msgspec.Struct):
    user: str
    token_length: int


@capability("tests.login", input=Credentials, output=Echo, title="Use a secret")
async def login(ctx: Context, inp: Credentials) -> Echo:
    return Echo(inp.user, len(inp.token))


class Count(msgspec.Struct, forbid_unknown_fields=True):
    events: int = 1000


class Counted(msgspec.Struct):
    events: int


@capability("tests.chatty", input=Count, output=Counted, title="Report in a tight loop")
async def chatty(ctx: Context, inp: Count) -> Counted:
    for i in range(inp.events):
        ctx.progress(i + 1, inp.events)
        if i % 50 == 0:
            await asyncio.sleep(0)
    return Counted(inp.events)


@capability("tests.boom", input=Empty, output=Done, title="Raise")
async def boom(ctx: Context, inp: Empty) -> Done:
    raise ValueError("secret internals that must not leak")


@capability("tests.refuse", input=Empty, output=Done, title="Raise a typed error")
async def refuse(ctx: Context, inp: Empty) -> Done:
    raise MajordomusError("refused", "not today", "try tomorrow")


@capability("tests.plain", input=Count, output=Counted, title="A plain def in a thread")
def plain(ctx: Context, inp: Count) -> Counted:
    for i in range(inp.events):
        ctx.log(f"line {i}")
    return Counted(inp.events)


class Lie(msgspec.Struct, forbid_unknown_fields=True):
    kind: str = "struct"


@capability("tests.liar", input=Lie, output=Counted, title="Answer what the output refuses")
async def liar(ctx: Context, inp: Lie) -> Counted:
    if inp.kind == "dict":
        return {"counted": 1}  # type: ignore[return-value]
    return Counted(events="many")  # type: ignore[arg-type]  # a Struct checks nothing when made


@capability("tests.leaky", input=Credentials, output=Echo, title="Raise with a secret in it")
async def leaky(ctx: Context, inp: Credentials) -> Echo:
    raise ValueError(f"the token {inp.token} was refused: " + "x" * 1000)


@capability("tests.deadline", input=Sleep, output=Slept, title="Sleep past a timeout", timeout=0.3)
async def deadline(ctx: Context, inp: Sleep) -> Slept:
    await ctx.sleep(inp.seconds)  # wakes when asked to stop
    ctx.raise_if_cancelled()
    return Slept(inp.seconds)


@capability("tests.deaf", input=Sleep, output=Slept, title="Ignore a timeout", timeout=0.3)
async def deaf(ctx: Context, inp: Sleep) -> Slept:
    await asyncio.sleep(inp.seconds)
    return Slept(inp.seconds)


@capability("tests.deaf_plain", input=Sleep, output=Slept, title="Ignore a timeout, in a thread", timeout=0.3)
def deaf_plain(ctx: Context, inp: Sleep) -> Slept:
    time.sleep(inp.seconds)
    return Slept(inp.seconds)


@capability("tests.nap", input=Sleep, output=Slept, title="Sleep in a thread, deaf to cancels")
def nap(ctx: Context, inp: Sleep) -> Slept:
    time.sleep(inp.seconds)
    return Slept(inp.seconds)


class Order(msgspec.Struct, forbid_unknown_fields=True):
    customer: str
    quantity: int = 1
    rush: bool = False
    note: str = ""


@capability(
    "tests.order",
    input=Order,
    output=Done,
    title="Take an order",
    searchable=("customer", "quantity", "rush"),
)
async def order(ctx: Context, inp: Order) -> Done:
    return Done()


class Ping(msgspec.Struct, forbid_unknown_fields=True):
    tenant: str
    n: int = 0
    token: Secret = ""


class Pinged(msgspec.Struct):
    n: int
    token: str


@capability(
    "tests.throttled",
    input=Ping,
    output=Pinged,
    title="One a window per tenant, the first input",
    collapse=Throttle("tenant", seconds=2.0),
)
async def throttled(ctx: Context, inp: Ping) -> Pinged:
    return Pinged(inp.n, inp.token)


@capability(
    "tests.debounced",
    input=Ping,
    output=Pinged,
    title="Once a tenant is quiet for a second, the last input",
    collapse=Debounce("tenant", seconds=1.0),
    searchable=("n",),
)
async def debounced(ctx: Context, inp: Ping) -> Pinged:
    return Pinged(inp.n, inp.token)
