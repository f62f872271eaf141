"""The ticker: starts each schedule's executions on its cron ticks, once per tick.

Every worker runs a `Ticker`, and every ticker starts every tick: there is no leader to
elect or lose. A tick starts exactly one execution however many tickers race to it because
each start carries the idempotency key `schedule:<id>:<tick epoch ms>` (`StartOptions`),
which the store holds atomically across processes: the first start creates the execution,
every other answers it. After its start a ticker records the tick as the schedule's last
(only forward, `ScheduleStore.advance`); the tickers behind it read that at their wake and
skip the tick without a start.

A ticker sleeps until the next tick of any active schedule, or `RELOAD_SECONDS` at most: at
each wake it reads the schedules' version (and the last ticks of those due) in one round
trip, and loads the schedules again when the version moved, so a schedule created, paused,
resumed or deleted anywhere is seen within a second and an idle ticker costs one small read
a second. Ticks older than `MAJORDOMUS_SCHEDULE_GRACE` that nobody started are missed
(`majordomus.schedules`): `once` starts one execution for them, keyed by the latest, which
carries a `schedule.missed` diagnostic; `skip` starts none; both say so in the worker's log.

At its start a ticker syncs the declared schedules into Redis (`sync_declared`): each
capability's `schedules=[...]`, as `<capability id>:<name or index>`, their pause and last
tick kept (one whose declaration changed starts from now); a declared schedule of a
capability this worker has that the code no longer declares is forgotten. A schedule whose
capability this worker lacks is left to the workers that have it. This module names no Redis command, and runs nothing itself: the executions
it starts run on the workers like any other.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from majordomus import clock
from majordomus.clock import stamp_of
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.loops import Failures, stop_task
from majordomus.metrics import METRICS
from majordomus.model import ExecutionDiagnostic
from majordomus.registry import Registry, RegistryError
from majordomus.schedules import (
    MISSED_CODE,
    MISSED_COUNT_BOUND,
    Due,
    ScheduleDefinition,
    StoredSchedule,
    check_cron,
    declared_id,
    definition_of,
    due_ticks,
    next_tick_ms,
)
from majordomus.schemas import validate_input
from majordomus.start_options import StartOptions
from majordomus.store.schedules import ScheduleStore

log = logging.getLogger("majordomus.ticker")

RELOAD_SECONDS = 1.0
"""The longest a ticker sleeps: a change of any schedule is seen within this."""


def idempotency_key(schedule_id: str, tick_ms: int) -> str:
    """The key of the one execution of a tick."""
    return f"schedule:{schedule_id}:{tick_ms}"


def declared_schedules(registry: Registry) -> dict[str, ScheduleDefinition]:
    """Every capability's declared schedules by id, each input checked against its
    capability's (a bad one is a `RegistryError`: the declaration is wrong, as a conflict is)."""
    found: dict[str, ScheduleDefinition] = {}
    for cap in registry:
        for index, schedule in enumerate(cap.schedules):
            schedule_id = declared_id(cap.id, schedule, index)
            if schedule_id in found:
                raise RegistryError(f"schedule {schedule_id!r} of {cap.id!r} is declared twice")
            if not cap.executable:
                raise RegistryError(f"{cap.id!r} answers directly: it cannot be scheduled")
            try:
                validate_input(cap.input, dict(schedule.input))
            except MajordomusError as exc:
                raise RegistryError(
                    f"the input of schedule {schedule_id!r} does not fit {cap.id!r}: {exc.message}"
                ) from None
            found[schedule_id] = definition_of(cap.id, schedule)
    return found


async def sync_declared(
    store: ScheduleStore, registry: Registry, declared: dict[str, ScheduleDefinition]
) -> int:
    """Store the declared schedules (pause and last tick kept) and forget the declared ones
    of this registry's capabilities that are declared no more. Answers how many changed."""
    changed = 0
    for schedule_id, definition in declared.items():
        changed += await store.declare(schedule_id, definition)
    _, stored = await store.every()
    for schedule in stored:
        stale = schedule.origin == "declared" and schedule.id not in declared
        if stale and schedule.definition.capability in registry:
            changed += await store.remove(schedule.id, ("declared",)) == 1
            log.info("schedule %s is declared no more: forgotten", schedule.id)
    return changed


@dataclass
class _Next:
    """When an active schedule is next due, as computed from its cursor."""

    cursor_ms: int
    due_ms: int


class Ticker:
    """One process's ticker: `start()` it, `stop()` it; `wake()` is one wake (for tests)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.store = ScheduleStore(engine.redis, engine.settings)
        self.grace_ms = int(engine.settings.schedule_grace * 1000)
        self.declared = declared_schedules(self.registry)
        self.synced = False
        self.version: int | None = None
        self.schedules: dict[str, StoredSchedule] = {}
        """The active schedules this process can start (not paused, capability known)."""
        self.cursors: dict[str, int] = {}
        """Per schedule, the tick up to which this ticker has done everything."""
        self._next: dict[str, _Next] = {}
        self.failures = Failures(log, "the schedule ticker")
        self._task: asyncio.Task[None] | None = None

    # -- life -------------------------------------------------------------------------

    def start(self, *, with_task: asyncio.Task[Any] | None = None) -> None:
        """Start ticking; with `with_task`, be cancelled as soon as that task ends (a worker's
        main task, which a process may cancel without stopping anything else)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="majordomus-ticker")
        task = self._task
        if with_task is not None:
            with_task.add_done_callback(lambda _: task.cancel())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task, log)

    async def run(self) -> None:
        """Wake, start what is due, sleep until the next tick; until cancelled. A failure
        (Redis away) is said once and retried, backing off, never past `RELOAD_SECONDS`
        plus the backoff cap."""
        while True:
            try:
                if not self.synced:
                    await sync_declared(self.store, self.registry, self.declared)
                    self.synced = True
                wait = await self.wake()
            except Exception as exc:  # noqa: BLE001  said once, retried
                self.failures.failed(exc)
                wait = self.failures.backoff()
            else:
                self.failures.recovered()
            await clock.sleep(wait)  # wakes early when a test skips time

    # -- one wake ---------------------------------------------------------------------

    async def wake(self, now_ms: int | None = None) -> float:
        """Load the schedules if they changed, start every tick due; answers the seconds
        until the next wake."""
        now = now_ms if now_ms is not None else _now_ms()
        due = [s for s in self.schedules.values() if self._due_at(s) <= now]
        version, ticks = await self.store.version_and_ticks([s.id for s in due])
        if version != self.version:
            await self._load()
            due = [s for s in self.schedules.values() if self._due_at(s) <= now]
            recorded = {s.id: s.last_tick_ms for s in due}
        else:
            recorded = {s.id: t for s, t in zip(due, ticks, strict=True)}
        for schedule in due:
            cursor = max(self._cursor(schedule), recorded.get(schedule.id) or 0)
            await self._start_due(schedule, self._due(schedule, cursor, now))
        return self._sleep_seconds()

    def _due(self, schedule: StoredSchedule, cursor: int, now: int) -> Due:
        """What is due, and at once in the common case: the tick this wake was for, within
        its second (ticks are whole seconds apart, so no other can be due)."""
        known = self._next.get(schedule.id)
        if known is not None and known.cursor_ms == cursor:
            tick = known.due_ms
            if now - self.grace_ms <= tick <= now < tick + 1000:
                return Due(late=(tick,))
        return due_ticks(*_when(schedule), cursor, now, self.grace_ms)

    async def _load(self) -> None:
        self.version, stored = await self.store.every()
        self.schedules = {
            s.id: s
            for s in stored
            if not s.paused and s.definition.capability in self.registry and self._usable(s)
        }
        for gone in set(self.cursors) - set(self.schedules):
            del self.cursors[gone]
        self._next = {}

    def _usable(self, schedule: StoredSchedule) -> bool:
        """Whether this process can compute its ticks (a time zone its tz database lacks, a
        cron its croniter reads otherwise: said at each load, and left to other workers)."""
        try:
            check_cron(*_when(schedule))
        except MajordomusError as exc:
            log.error("schedule %s cannot tick here: %s", schedule.id, exc.message)
            return False
        return True

    def _cursor(self, schedule: StoredSchedule) -> int:
        return max(self.cursors.get(schedule.id, 0), schedule.cursor_ms)

    def _due_at(self, schedule: StoredSchedule) -> int:
        """When `schedule` is next due after its cursor (cached until the cursor moves)."""
        cursor = self._cursor(schedule)
        known = self._next.get(schedule.id)
        if known is None or known.cursor_ms != cursor:
            known = self._next[schedule.id] = _Next(cursor, next_tick_ms(*_when(schedule), cursor))
        return known.due_ms

    def _sleep_seconds(self) -> float:
        if not self.schedules:
            return RELOAD_SECONDS
        soonest = min(self._due_at(s) for s in self.schedules.values())
        # A wake a fraction early finds nothing due and sleeps that fraction again.
        return max(0.0, min(RELOAD_SECONDS, soonest / 1000 - clock.now()))

    async def _start_due(self, schedule: StoredSchedule, due: Due) -> None:
        if due.missed is not None:
            await self._missed(schedule, due)
        for tick in due.late:
            execution_id = await self._start(schedule, tick)
            await self.store.advance(schedule.id, tick, execution_id)
            self.cursors[schedule.id] = tick

    async def _missed(self, schedule: StoredSchedule, due: Due) -> None:
        tick = due.missed
        assert tick is not None
        count = str(due.missed_count)
        if due.missed_count >= MISSED_COUNT_BOUND:
            count = f"at least {MISSED_COUNT_BOUND}"
        if schedule.definition.missed == "skip":
            if await self.store.advance(schedule.id, tick, None):
                log.warning(
                    "schedule %s: %s ticks missed while nothing ran (the last at %s); "
                    "skipped, as it says (missed=skip)",
                    schedule.id,
                    count,
                    stamp_of(tick),
                )
        else:
            execution_id = await self._start(schedule, tick)
            if await self.store.advance(schedule.id, tick, execution_id) and execution_id:
                log.warning(
                    "schedule %s: %s ticks missed while nothing ran (the last at %s); "
                    "started once for them as %s (missed=once)",
                    schedule.id,
                    count,
                    stamp_of(tick),
                    execution_id,
                )
                await self._note_missed(execution_id, schedule, count, tick)
        self.cursors[schedule.id] = tick

    async def _start(self, schedule: StoredSchedule, tick_ms: int) -> str | None:
        """Start the tick's one execution (or answer it, when another ticker did); None
        when the start is refused (said in the log; the tick is not tried again)."""
        d = schedule.definition
        options = StartOptions(
            idempotency_key=idempotency_key(schedule.id, tick_ms),
            schedule=schedule.id,
            priority=d.priority,
        )
        try:
            snap = await self.engine.start(d.capability, d.input, actor="internal", options=options)
        except MajordomusError as exc:
            log.error(
                "schedule %s: the tick at %s started nothing: %s: %s%s",
                schedule.id,
                stamp_of(tick_ms),
                exc.code,
                exc.message,
                f" ({exc.suggestion})" if exc.suggestion else "",
            )
            return None
        return snap.id

    async def _note_missed(
        self, execution_id: str, schedule: StoredSchedule, count: str, tick_ms: int
    ) -> None:
        """The `schedule.missed` diagnostic on the execution that stands for missed ticks
        (written once: only by the ticker whose `advance` recorded the tick)."""
        diagnostic = ExecutionDiagnostic(
            "warning",
            MISSED_CODE,
            f"{count} ticks of schedule {schedule.id} were missed while nothing ran; "
            "this execution stands for them all",
            f"the last missed tick was at {stamp_of(tick_ms)}",
            "keep a worker running; a schedule that should not catch up says missed=skip",
        )
        event = ("execution.diagnostic", msgspec.json.encode(diagnostic))
        result = await self.engine.store.append(execution_id, [event])
        METRICS.events_appended(result.applied)


def _when(schedule: StoredSchedule) -> tuple[str, str]:
    return schedule.definition.cron, schedule.definition.timezone


def _now_ms() -> int:
    return clock.now_ms()
