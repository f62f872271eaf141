"""Capabilities in the process's own registry that run in child processes: loaded only by
the worker processes of `tests/workers/test_processes.py` (MAJORDOMUS_CAPABILITIES), so the
suite's in-process workers start no children."""

from __future__ import annotations

import os
import time

import msgspec

from majordomus.registry import capability


class Nap(msgspec.Struct, forbid_unknown_fields=True):
    seconds: float = 30.0


class Pid(msgspec.Struct):
    pid: int


@capability("procs.stuck", input=Nap, output=Pid, runs_in="process", cancellable=True)
def stuck(ctx, inp: Nap) -> Pid:
    """Sleeps, deaf to its cancel flag."""
    ctx.log(f"pid {os.getpid()}")
    time.sleep(inp.seconds)
    return Pid(os.getpid())
