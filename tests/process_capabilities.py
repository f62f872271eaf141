"""Capabilities that run in child processes of their worker (`runs_in="process"`), in a
registry of their own: the suite's other workers start no children."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import time

import msgspec

from majordomus import Secret
from majordomus.errors import MajordomusError
from majordomus.registry import Registry, capability
from majordomus.retries import Retry

PROCESS = Registry()


class Say(msgspec.Struct, forbid_unknown_fields=True):
    text: str = "hi"
    token: Secret | None = None
    reports: int = 0


class Said(msgspec.Struct):
    text: str
    pid: int


class Nap(msgspec.Struct, forbid_unknown_fields=True):
    seconds: float = 30.0


class Pid(msgspec.Struct):
    pid: int
    rss_mb: float = 0.0


class How(msgspec.Struct, forbid_unknown_fields=True):
    how: str = "exit"
    after: float = 0.0


class Count(msgspec.Struct):
    count: int


@capability("proc.say", input=Say, output=Said, runs_in="process", registry=PROCESS)
async def say(ctx, inp: Say) -> Said:
    ctx.step("say", "Saying it")
    ctx.progress(1, 2, "half way")
    if inp.token is not None:
        ctx.log(f"the token is {inp.token}")
    for i in range(inp.reports):
        ctx.log(f"report {i}")
    await asyncio.sleep(0)
    ctx.step_done("say", True, "said")
    ctx.diagnostic("info", "proc.note", "a note", "from the child")
    return Said(inp.text.upper(), os.getpid())


@capability("proc.shout", input=Say, output=Said, runs_in="process", registry=PROCESS)
def shout(ctx, inp: Say) -> Said:
    """A plain def handler in a process."""
    ctx.step("shout")
    for i in range(inp.reports):
        ctx.log(f"report {i}")
    ctx.step_done("shout")
    return Said(inp.text.upper() + "!", os.getpid())


@capability("proc.polite", input=Nap, output=Pid, runs_in="process", registry=PROCESS, cancellable=True)
async def polite(ctx, inp: Nap) -> Pid:
    """Sleeps, and stops when asked."""
    await ctx.sleep(inp.seconds)
    ctx.raise_if_cancelled()
    return Pid(os.getpid())


@capability("proc.polite_plain", input=Nap, output=Pid, runs_in="process", registry=PROCESS, cancellable=True)
def polite_plain(ctx, inp: Nap) -> Pid:
    """A plain def that looks at its cancel flag."""
    ends = time.monotonic() + inp.seconds
    while time.monotonic() < ends:
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    return Pid(os.getpid())


@capability(
    "proc.retried",
    input=Nap,
    output=Pid,
    runs_in="process",
    registry=PROCESS,
    retry=Retry(attempts=2, backoff_ms=0, jitter=0, retry_codes=("timed_out",)),
)
async def retried(ctx, inp: Nap) -> Pid:
    """Sleeps, stops when asked; a timeout is retried once."""
    await ctx.sleep(inp.seconds)
    ctx.raise_if_cancelled()
    return Pid(os.getpid())


@capability("proc.stuck", input=Nap, output=Pid, runs_in="process", registry=PROCESS, cancellable=True)
def stuck(ctx, inp: Nap) -> Pid:
    """A plain def that never looks at its cancel flag."""
    time.sleep(inp.seconds)
    return Pid(os.getpid())


@capability("proc.stuck_async", input=Nap, output=Pid, runs_in="process", registry=PROCESS, cancellable=True)
async def stuck_async(ctx, inp: Nap) -> Pid:
    """An async handler that blocks its child's loop, deaf to everything."""
    time.sleep(inp.seconds)
    return Pid(os.getpid())


@capability("proc.late", input=Nap, output=Pid, runs_in="process", registry=PROCESS, timeout=0.3)
def late(ctx, inp: Nap) -> Pid:
    """Past its 0.3 s timeout, deaf to the stop."""
    time.sleep(inp.seconds)
    return Pid(os.getpid())


@capability("proc.die", input=How, output=Pid, runs_in="process", registry=PROCESS)
def die(ctx, inp: How) -> Pid:
    """Dies as asked (`after` seconds): exit, kill (SIGKILL, as the OOM killer does) or segfault."""
    ctx.log("about to die")
    time.sleep(inp.after)
    if inp.how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif inp.how == "segfault":
        ctypes.string_at(0)
    os._exit(3)


@capability("proc.pid", input=How, output=Pid, runs_in="process", registry=PROCESS)
def pid(ctx, inp: How) -> Pid:
    return Pid(os.getpid())


LEAK: list[bytes] = []


@capability("proc.leak", input=How, output=Pid, runs_in="process", registry=PROCESS)
def leak(ctx, inp: How) -> Pid:
    """Keeps 2 MiB more each time it runs (touched, so resident)."""
    from majordomus.children.child import resident_bytes

    LEAK.append(os.urandom(2 * 1024 * 1024))
    return Pid(os.getpid(), resident_bytes() / 2**20)


class Zero(ValueError):
    pass


@capability("proc.fail", input=How, output=Pid, runs_in="process", registry=PROCESS)
def fail(ctx, inp: How) -> Pid:
    if inp.how == "typed":
        raise MajordomusError("conflict", "it conflicts", "try another")
    if inp.how == "unpicklable":
        raise UnpicklableError(lambda: None)
    raise Zero("division by zero, in a child")


class UnpicklableError(Exception):
    def __init__(self, fn: object) -> None:
        super().__init__("holds a lambda")
        self.fn = fn


@capability("proc.liar", input=How, output=Count, runs_in="process", registry=PROCESS)
def liar(ctx, inp: How) -> dict[str, str]:
    return {"count": "not a number"}


@capability("proc.ticks", input=Count, output=Count, runs_in="process", registry=PROCESS)
def ticks(ctx, inp: Count) -> Count:
    """Logs a line every 50 ms."""
    for i in range(inp.count):
        ctx.log(f"tick {i}")
        time.sleep(0.05)
    return Count(inp.count)


@capability("proc.flood", input=Count, output=Count, runs_in="process", registry=PROCESS)
async def flood(ctx, inp: Count) -> Count:
    """Reports far faster than they are written, never awaiting them."""
    for i in range(inp.count):
        ctx.log(f"line {i}")
        if i % 100 == 0:
            await asyncio.sleep(0)
    return Count(inp.count)


def registry() -> Registry:
    """The built-ins and these: what a worker running them, and an engine starting them, know."""
    from majordomus.loading import load_capabilities

    both = Registry()
    for cap in load_capabilities([]):
        if cap.id.split(".", 1)[0] in {"executions", "capabilities", "episodes", "queue", "schedules"}:
            both.add(cap)
    for cap in PROCESS:
        both.add(cap)
    return both


class Tell(msgspec.Struct, forbid_unknown_fields=True):
    token: Secret
    how: str = "succeed"


class Told(msgspec.Struct):
    shown: str
    token: Secret


async def _tattle(ctx, inp: Tell) -> Told:
    """Puts its secret in every text it reports, and in its output and its errors."""
    t = inp.token
    ctx.step(f"step-{t}", f"title {t}")
    ctx.progress(1, 2, f"progress {t}")
    ctx.log(f"log {t}")
    ctx.diagnostic("info", f"code-{t}", f"summary {t}", f"detail {t}", f"suggestion {t}")
    ctx.step_done(f"step-{t}", True, f"detail {t}")
    if inp.how == "typed":
        raise MajordomusError("conflict", f"message {t}", f"suggestion {t}")
    if inp.how == "raise":
        raise ValueError(f"value {t}")
    return Told("told", t)


@capability("proc.tattle", input=Tell, output=Told, runs_in="process", registry=PROCESS)
async def tattle(ctx, inp: Tell) -> Told:
    return await _tattle(ctx, inp)


@capability("loop.tattle", input=Tell, output=Told, registry=PROCESS)
async def tattle_in_the_loop(ctx, inp: Tell) -> Told:
    return await _tattle(ctx, inp)
