"""The retry scenarios' capabilities, declared into a given registry: the worker and API
processes' (`tests.retries.capabilities`) and the test process's own private one (so the
process registry stays what other tests compare the API with).

Each handler counts its attempts in a file named by its input (the attempts run in worker
processes, the test reads the file): one line per attempt, with the worker's pid and the
secret input it was given.
"""

from __future__ import annotations

import asyncio
import os

import msgspec

from majordomus import Context, MajordomusError, Secret
from majordomus.registry import Registry, capability
from majordomus.retries import Retry

FLAKY = "retries.flaky"
PATIENT = "retries.patient"
FRAGILE = "retries.fragile"


class Attempted(msgspec.Struct):
    attempts: int
    """Which attempt answered (its line in the marker file)."""


class FlakyInput(msgspec.Struct, forbid_unknown_fields=True):
    marker: str
    fail_times: int = 2
    error: str = "runtime"
    """`runtime` (retried), `value` (not retried) or one of our codes (raised as ours)."""
    token: Secret = ""


class MarkerInput(msgspec.Struct, forbid_unknown_fields=True):
    marker: str


def record(marker: str, token: str = "") -> int:
    """Note this attempt in the marker file; answers its number."""
    with open(marker, "a") as f:
        f.write(f"{os.getpid()} {token}\n")
    with open(marker) as f:
        return sum(1 for _ in f)


def declare(registry: Registry) -> None:
    @capability(
        FLAKY,
        input=FlakyInput,
        output=Attempted,
        title="Fail a few times, then answer",
        retry=Retry(
            attempts=3,
            backoff_ms=200,
            factor=2,
            jitter=0,
            retry_on=(RuntimeError,),
            retry_codes=("unavailable",),
        ),
        registry=registry,
    )
    async def flaky(ctx: Context, inp: FlakyInput) -> Attempted:
        attempt = record(inp.marker, inp.token)
        if attempt <= inp.fail_times:
            if inp.error == "runtime":
                raise RuntimeError(f"attempt {attempt} failed")
            if inp.error == "value":
                raise ValueError(f"attempt {attempt} failed")
            raise MajordomusError(inp.error, f"attempt {attempt} failed")  # type: ignore[arg-type]
        return Attempted(attempt)

    @capability(
        PATIENT,
        input=MarkerInput,
        output=Attempted,
        title="Always fail, retried after a minute",
        retry=Retry(attempts=2, backoff_ms=60_000, jitter=0),
        registry=registry,
    )
    async def patient(ctx: Context, inp: MarkerInput) -> Attempted:
        record(inp.marker)
        raise RuntimeError("never works")

    @capability(
        FRAGILE,
        input=MarkerInput,
        output=Attempted,
        title="The first attempt hangs (its worker is killed), the next answers",
        retry=Retry(attempts=3, backoff_ms=100, jitter=0, retry_codes=("unavailable",)),
        registry=registry,
    )
    async def fragile(ctx: Context, inp: MarkerInput) -> Attempted:
        attempt = record(inp.marker)
        if attempt == 1:
            await asyncio.sleep(120)
        return Attempted(attempt)
