"""The work the fault scenarios put under load: a handler that reports for a few seconds.

`faults.report` walks `steps` steps of `interval` seconds, reporting `step.started`,
`step.completed` and `progress` for each, so a test can tell from the events alone whether
every report the handler made arrived, once and in order. With `marker_dir` it keeps a file
named for its execution there while its handler runs, so a test sees from outside whether
a worker really stopped a handler.

This module declares nothing when imported: `declare(registry)` does, into the test
process's private registry (the suite's process registry must stay what the other tests
compare the API with) and, through `tests.faults.capabilities`, into the child processes'.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from majordomus import Context, capability
from majordomus.registry import Registry

REPORT = "faults.report"


class Report(msgspec.Struct, forbid_unknown_fields=True):
    steps: int = 8
    interval: float = 0.5
    marker_dir: str = ""


class Reported(msgspec.Struct):
    steps: int


async def report(ctx: Context, inp: Report) -> Reported:
    marker = Path(inp.marker_dir) / str(ctx.execution_id) if inp.marker_dir else None
    if marker is not None:
        marker.write_text("running")
    try:
        for i in range(inp.steps):
            name = f"s{i + 1}"
            ctx.step(name, f"Step {i + 1}")
            await ctx.sleep(inp.interval)
            ctx.raise_if_cancelled()
            ctx.step_done(name)
            ctx.progress(i + 1, inp.steps)
        return Reported(inp.steps)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)


def declare(registry: Registry) -> None:
    capability(
        REPORT,
        input=Report,
        output=Reported,
        title="Report steps and progress for a while",
        cancellable=True,
        registry=registry,
    )(report)
