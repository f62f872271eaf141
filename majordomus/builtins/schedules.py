"""The `schedules.*` capabilities: create, list, pause, resume, run now and delete schedules.

Declared like any user's capabilities (control capabilities, as `**CONTROL`), so the
routes (`/api/v1/schedules...`), the MCP tools (`majordomus_schedules_*`) and the commands
(`majordomus schedules list`, ...) are projections of these declarations. What a schedule
is lives in `majordomus.schedules`, its storage in `majordomus.store.schedules`, its ticks
in `majordomus.ticker` (run by every worker); nothing here ticks.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from majordomus import clock
from majordomus.builtins.common import control, engine_of
from majordomus.errors import MajordomusError, invalid_input, not_found, refused
from majordomus.model import ExecutionSnapshot
from majordomus.priorities import Priority
from majordomus.registry import capability
from majordomus.schedules import (
    Cron,
    Missed,
    ScheduleDefinition,
    ScheduleId,
    ScheduleName,
    ScheduleView,
    StoredSchedule,
    TimeZone,
    check_cron,
    created_id,
    view_of,
)
from majordomus.schemas import INPUT_OF

if TYPE_CHECKING:
    from majordomus.context import Context
    from majordomus.engine import Engine
    from majordomus.store.schedules import ScheduleStore

CONTROL = control("schedules", stability="experimental")
"""Experimental, tagged `schedules`, answering directly."""


class CreateInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `schedules.create`."""

    capability: str
    """The capability each tick starts (one that runs as an execution)."""
    cron: Cron
    """Five fields (minute hour day month weekday) or six with the seconds first:
    '* * * * * *' is every second, '0 9 * * 1-5' 09:00 on weekdays; or '@hourly', '@daily'."""
    timezone: TimeZone = "UTC"
    """The IANA time zone the cron is read in (Europe/Paris, America/New_York...)."""
    execution_input: Annotated[
        dict[str, Any], msgspec.Meta(extra_json_schema={INPUT_OF: "capability"})
    ] = {}
    """The input of every execution it starts, checked now against the capability's schema
    (kept whole for the workers; shown redacted, as an execution's is)."""
    missed: Missed = "once"
    """Ticks missed while nothing ran (every worker down past the grace): 'once' starts one
    execution for them when a worker is back, 'skip' starts none."""
    name: ScheduleName | None = None
    """Its id is '<capability>:<name>'; absent: '<capability>:<8 hex>'."""
    priority: Priority | None = None
    """The priority of its executions; absent: the capability's."""


class ListInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `schedules.list`."""

    capability: str | None = None
    """Only the schedules of this capability."""


class ScheduleList(msgspec.Struct):
    count: int
    schedules: list[ScheduleView]
    """Oldest first, each with its next tick (unless paused) and its last one."""


class ScheduleInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `schedules.pause`, `schedules.resume` and `schedules.delete`."""

    id: ScheduleId


class ScheduleChange(msgspec.Struct):
    schedule: ScheduleView
    """The schedule after the change (for delete: as it was)."""
    changed: bool
    """False when it was so already (paused, or resumed): nothing changed."""


# -- storage ------------------------------------------------------------------------------

_stores: weakref.WeakKeyDictionary[Engine, ScheduleStore] = weakref.WeakKeyDictionary()


def store_of(ctx: Context) -> tuple[Engine, ScheduleStore]:
    """The engine, and the schedule store on its Redis (one per engine)."""
    from majordomus.store.schedules import ScheduleStore

    engine = engine_of(ctx)
    store = _stores.get(engine)
    if store is None:
        store = _stores[engine] = ScheduleStore(engine.redis, engine.settings)
    return engine, store


def shown(engine: Engine, stored: StoredSchedule) -> ScheduleView:
    """A stored schedule as answered: its input redacted by its capability's schema; every
    member of it redacted when this process lacks the capability (nothing to tell its
    secrets by)."""
    from majordomus.schemas import REDACTED, redact

    cap = engine.registry.get(stored.definition.capability)
    plain = stored.definition.input
    safe = redact(cap.input, plain) if cap else dict.fromkeys(plain, REDACTED)
    return view_of(stored, safe, clock.now_ms())


def _unknown(schedule_id: str) -> MajordomusError:
    return not_found(
        f"there is no schedule {schedule_id!r}",
        "list them with schedules.list (majordomus schedules list, GET /api/v1/schedules)",
    )


# -- the capabilities ---------------------------------------------------------------------


@capability(
    "schedules.create",
    kind="command",
    input=CreateInput,
    output=ScheduleView,
    title="Create a schedule",
    description=(
        "Start a capability on the ticks of a cron expression, from now on, with the same "
        "input each time. The cron is five fields (minute hour day month weekday) or six "
        "with the seconds first ('* * * * * *' is every second), read in 'timezone'. Every "
        "worker ticks it and each tick starts exactly one execution, which names the "
        "schedule in its 'schedule' member. A tick started late (up to "
        "MAJORDOMUS_SCHEDULE_GRACE, 10 s by default) is just late; ticks missed while no "
        "worker ran are started once ('missed': 'once') or skipped ('skip'). The cron, the "
        "time zone and the execution_input are checked now: a bad one is invalid_input."
    ),
    **CONTROL,
)
async def create(ctx: Context, inp: CreateInput) -> ScheduleView:
    from majordomus.schemas import validate_input

    engine, store = store_of(ctx)
    cap = engine.registry.require(inp.capability)
    if not cap.executable:
        raise refused(
            f"{cap.id} answers directly and is not started as an execution, so it cannot be "
            "scheduled",
            "schedule a capability that runs on the workers (majordomus capabilities list)",
        )
    check_cron(inp.cron, inp.timezone)
    try:
        validate_input(cap.input, inp.execution_input)
    except MajordomusError as exc:
        raise invalid_input(
            f"the schedule's input does not fit {cap.id}: {exc.message}",
            f"see its input schema: majordomus capabilities describe {cap.id}",
        ) from None
    schedule_id = created_id(cap.id, inp.name)
    definition = ScheduleDefinition(
        capability=cap.id,
        cron=inp.cron.strip(),
        timezone=inp.timezone,
        input=inp.execution_input,
        missed=inp.missed,
        name=inp.name,
        priority=inp.priority,
    )
    if not await store.create(schedule_id, definition):
        raise refused(
            f"there is already a schedule {schedule_id!r}",
            "give it another name, or delete that one first (schedules.delete)",
        )
    stored = await store.one(schedule_id)
    if stored is None:  # deleted by someone else in between: say so rather than guess
        raise _unknown(schedule_id)
    return shown(engine, stored)


@capability(
    "schedules.list",
    kind="query",
    input=ListInput,
    output=ScheduleList,
    title="List schedules",
    description=(
        "Every schedule, declared (with its capability) and created (by schedules.create), "
        "oldest first: its cron and time zone, whether it is paused, its next tick and the "
        "last tick it started an execution for, with that execution."
    ),
    http=("GET", "/api/v1/schedules"),
    **CONTROL,
)
async def list_schedules(ctx: Context, inp: ListInput) -> ScheduleList:
    engine, store = store_of(ctx)
    _, stored = await store.every()
    found = [
        shown(engine, s)
        for s in stored
        if inp.capability is None or s.definition.capability == inp.capability
    ]
    return ScheduleList(len(found), found)


async def _set_paused(ctx: Context, schedule_id: str, paused: bool) -> ScheduleChange:
    engine, store = store_of(ctx)
    changed = await store.set_paused(schedule_id, paused)
    stored = await store.one(schedule_id) if changed is not None else None
    if stored is None:
        raise _unknown(schedule_id)
    return ScheduleChange(shown(engine, stored), bool(changed))


@capability(
    "schedules.pause",
    kind="command",
    input=ScheduleInput,
    output=ScheduleChange,
    title="Pause a schedule",
    description=(
        "Stop a schedule's ticks until it is resumed (within a second on every worker); "
        "what it started goes on. Declared schedules are paused like created ones, and stay "
        "paused when the workers restart."
    ),
    **CONTROL,
)
async def pause(ctx: Context, inp: ScheduleInput) -> ScheduleChange:
    return await _set_paused(ctx, inp.id, True)


@capability(
    "schedules.resume",
    kind="command",
    input=ScheduleInput,
    output=ScheduleChange,
    title="Resume a schedule",
    description=(
        "Tick a paused schedule again, from now: the ticks that fell while it was paused are "
        "not started (nor counted as missed)."
    ),
    **CONTROL,
)
async def resume(ctx: Context, inp: ScheduleInput) -> ScheduleChange:
    return await _set_paused(ctx, inp.id, False)


@capability(
    "schedules.run_now",
    kind="command",
    input=ScheduleInput,
    output=ExecutionSnapshot,
    title="Run a schedule now",
    description=(
        "Start a schedule's capability with its input now, once, beside its ticks (which "
        "go on as before, paused or not): the execution names the schedule in 'schedule' "
        "and its caller as actor, and is answered queued, as executions.start answers."
    ),
    http=("POST", "/api/v1/schedules/run"),
    cli=("schedules", "run"),
    **CONTROL,
)
async def run_now(ctx: Context, inp: ScheduleInput) -> ExecutionSnapshot:
    from majordomus.start_options import StartOptions

    engine, store = store_of(ctx)
    stored = await store.one(inp.id)
    if stored is None:
        raise _unknown(inp.id)
    d = stored.definition
    options = StartOptions(schedule=stored.id, priority=d.priority)
    return await engine.start(d.capability, d.input, actor=ctx.actor, options=options)


@capability(
    "schedules.delete",
    kind="command",
    input=ScheduleInput,
    output=ScheduleChange,
    title="Delete a schedule",
    description=(
        "Delete a schedule made by schedules.create; what it started goes on. A declared "
        "schedule belongs to its capability's code and is refused: pause it instead, or "
        "remove it from the declaration."
    ),
    **CONTROL,
)
async def delete(ctx: Context, inp: ScheduleInput) -> ScheduleChange:
    engine, store = store_of(ctx)
    stored = await store.one(inp.id)
    if stored is None:
        raise _unknown(inp.id)
    done = await store.remove(inp.id)
    if done == -1:
        raise refused(
            f"schedule {inp.id!r} is declared with its capability, so it is not deleted here",
            f"pause it (schedules.pause {inp.id}), or remove it from the capability's declaration",
        )
    if done == 0:
        raise _unknown(inp.id)
    return ScheduleChange(shown(engine, stored), True)
