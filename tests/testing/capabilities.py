"""Capabilities for the testing kit's tests, declared in a registry of their own (`KIT`), so
no other test's worker runs them or ticks their schedule."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from majordomus import Context, MajordomusError, RateLimit, Retry, Schedule, capability
from majordomus.registry import Registry

KIT = Registry()

TEN_MINUTES_MS = 600_000


class Note(msgspec.Struct, forbid_unknown_fields=True):
    text: str = "hello"


class Noted(msgspec.Struct):
    text: str


@capability("kit.note", input=Note, output=Noted, registry=KIT)
async def note(ctx: Context, inp: Note) -> Noted:
    """Report a step, progress, a log line and a diagnostic, and answer the text."""
    ctx.step("write", "Writing the note")
    ctx.progress(1, 2)
    ctx.log(f"noting {inp.text}")
    ctx.diagnostic("info", "kit.noted", f"noted {len(inp.text)} characters")
    ctx.progress(2, 2)
    ctx.step_done("write")
    return Noted(inp.text)


class Wait(msgspec.Struct, forbid_unknown_fields=True):
    seconds: float = 60.0


@capability("kit.linger", input=Wait, output=Noted, registry=KIT, cancellable=True)
async def linger(ctx: Context, inp: Wait) -> Noted:
    """Sleep until cancelled (or `seconds` of real time)."""
    ctx.step("linger", "Lingering")
    await ctx.sleep(inp.seconds)
    ctx.raise_if_cancelled()
    return Noted("lingered")


class Flaky(msgspec.Struct, forbid_unknown_fields=True):
    succeed_on: int = 3
    """The attempt that succeeds."""


@capability(
    "kit.flaky",
    input=Flaky,
    output=Noted,
    registry=KIT,
    retry=Retry(
        attempts=3,
        backoff_ms=TEN_MINUTES_MS,
        factor=1.0,
        max_backoff_ms=TEN_MINUTES_MS,
        jitter=0.0,
        retry_codes=("unavailable",),
    ),
)
async def flaky(ctx: Context, inp: Flaky) -> Noted:
    """Fail `unavailable` until the attempt `succeed_on`; retried every ten minutes."""
    snap = await ctx.engine.get(ctx.execution_id)  # type: ignore[union-attr]
    if snap.attempt < inp.succeed_on:
        raise MajordomusError("unavailable", f"attempt {snap.attempt} fails", "wait")
    return Noted(f"attempt {snap.attempt}")


class Morning(msgspec.Struct, forbid_unknown_fields=True):
    kind: str = "sales"


@capability(
    "kit.report",
    input=Morning,
    output=Noted,
    registry=KIT,
    schedules=[Schedule("0 7 * * *", input={"kind": "sales"}, name="morning")],
)
async def report(ctx: Context, inp: Morning) -> Noted:
    """Every day at 07:00 UTC."""
    return Noted(inp.kind)


async def running(execution: Any, timeout: float = 5.0) -> None:
    """Until `execution` (a client's handle) is `running` on a worker."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await execution.refresh()).state != "running":
        assert loop.time() < deadline, f"{execution} is not running after {timeout} s"
        await asyncio.sleep(0.005)


@capability(
    "kit.hourly_note",
    input=Note,
    output=Noted,
    registry=KIT,
    rate_limit=RateLimit(2, "hour", key="text"),
)
async def hourly_note(ctx: Context, inp: Note) -> Noted:
    """Answer the text, at most twice an hour per text (`majordomus.flow.RateLimit`)."""
    return Noted(inp.text)
