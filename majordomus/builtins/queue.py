"""The `queue.*` built-ins: the cluster's queue and its workers, as operators read them.

Declared like any user's capability (control capabilities, as `**CONTROL`), so
`majordomus queue` and `majordomus workers`, `GET /api/v1/queue` and
`GET /api/v1/queue/workers`, and the MCP tools `majordomus_queue` and `majordomus_workers`
are projections of these two declarations and answer alike wherever they are asked. The
reports themselves (what they read, when a worker is silent) are `majordomus.reports`'s;
nothing here reads the store. `queue.drain` and `queue.undrain` (`majordomus drain ID`,
`POST /api/v1/queue/drain`) set and clear a worker's drain flag through the store, which
the worker reads with its beat (`workers/runtime.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from majordomus.builtins.common import control, engine_of
from majordomus.clock import now_stamp
from majordomus.errors import not_found
from majordomus.registry import capability
from majordomus.reports import (
    QueueReport,
    WorkerPresence,
    WorkerReport,
    queue_report,
    worker_presence,
    worker_report,
)

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


class DrainInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `queue.drain` and `queue.undrain`."""

    id: str
    """The worker's id, as `queue.workers` lists it."""


class DrainChange(msgspec.Struct):
    worker: WorkerPresence
    """The worker after the change: `draining` at once, `accepting` false from its next beat
    (a fifth of the lease) once drained, true again once undrained."""
    changed: bool
    """False when it was so already (drained, or not): nothing changed."""


async def _set_drain(ctx: Context, worker_id: str, drained: bool) -> DrainChange:
    engine = engine_of(ctx)
    changed = await engine.store.set_drain(worker_id, drained, now_stamp()[0])
    found = [w for w in await worker_presence(engine) if w.id == worker_id]
    if changed is None or not found:
        raise not_found(
            f"there is no worker {worker_id!r}",
            "list them with queue.workers (majordomus workers, GET /api/v1/queue/workers)",
        )
    return DrainChange(found[0], bool(changed))


@capability(
    "queue.drain",
    kind="command",
    input=DrainInput,
    output=DrainChange,
    title="Drain a worker",
    description=(
        "Have a worker finish what it runs and take no new executions, until queue.undrain: "
        "for a deployment, a suspect machine, a worker to be stopped without cutting work "
        "short. The worker sees it at its next beat (within a fifth of the lease); what it "
        "had taken before it runs to the end, and the executions started meanwhile wait, "
        "queued, for other workers. It stays drained across an API restart; a SIGTERM "
        "still stops it as usual. /api/v1/ready lists the drained workers."
    ),
    mcp="majordomus_worker_drain",
    http=("POST", "/api/v1/queue/drain"),
    cli=("drain",),
    **CONTROL,
)
async def drain(ctx: Context, inp: DrainInput) -> DrainChange:
    return await _set_drain(ctx, inp.id, True)


@capability(
    "queue.undrain",
    kind="command",
    input=DrainInput,
    output=DrainChange,
    title="Undrain a worker",
    description=(
        "Let a drained worker take executions again (at its next beat, within a fifth of the "
        "lease)."
    ),
    mcp="majordomus_worker_undrain",
    http=("POST", "/api/v1/queue/undrain"),
    cli=("undrain",),
    **CONTROL,
)
async def undrain(ctx: Context, inp: DrainInput) -> DrainChange:
    return await _set_drain(ctx, inp.id, False)
