"""The `queue.*` built-ins: the cluster's queue and its workers, as operators read them.

Declared like any user's capability (control capabilities, as `**CONTROL`), so
`majordomus queue` and `majordomus workers`, `GET /api/v1/queue` and
`GET /api/v1/queue/workers`, and the MCP tools `majordomus_queue` and `majordomus_workers`
are projections of these two declarations and answer alike wherever they are asked. The
reports themselves (what they read, when a worker is silent) are `majordomus.reports`'s;
nothing here reads the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from majordomus.builtins.common import control, engine_of
from majordomus.registry import capability
from majordomus.reports import QueueReport, WorkerReport, queue_report, worker_report

if TYPE_CHECKING:
    from majordomus.context import Context

CONTROL = control("queue")
"""Stable, tagged `queue`, answering directly."""


class QueueInput(msgspec.Struct, forbid_unknown_fields=True):
    """`queue.show` takes nothing."""


@capability(
    "queue.show",
    kind="query",
    input=QueueInput,
    output=QueueReport,
    title="Show the queue",
    description=(
        "The queue now: what waits (by capability, with the oldest wait), what runs on which "
        "worker, every worker with its last beat (silent ones marked: no beat within the "
        "lease, or its lease gone, so its executions are about to fail as unavailable), and "
        "the executions that failed or were cancelled lately, with their codes."
    ),
    mcp="majordomus_queue",
    http=("GET", "/api/v1/queue"),
    cli=("queue",),
    **CONTROL,
)
async def show(ctx: Context, inp: QueueInput) -> QueueReport:
    return await queue_report(engine_of(ctx))


class WorkersInput(msgspec.Struct, forbid_unknown_fields=True):
    """`queue.workers` takes nothing."""


@capability(
    "queue.workers",
    kind="query",
    input=WorkersInput,
    output=WorkerReport,
    title="List the workers",
    description=(
        "Every worker that reported itself: host, pid, executions it runs now, seconds since "
        "its last beat, and whether it is silent (presumed dead) or draining."
    ),
    mcp="majordomus_workers",
    http=("GET", "/api/v1/queue/workers"),
    cli=("workers",),
    **CONTROL,
)
async def workers(ctx: Context, inp: WorkersInput) -> WorkerReport:
    return await worker_report(engine_of(ctx))
