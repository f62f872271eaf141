"""Schedules: cron expressions that start a capability on their ticks.

A schedule is declared with its capability (`@capability(..., schedules=[Schedule(...)])`,
id `<capability id>:<name or index>`) or created at run time by `schedules.create` (id
`<capability id>:<name or 8 hex>`); both live in Redis (`majordomus.store.schedules`) and
every worker's ticker (`majordomus.ticker`) starts them. This module holds what a schedule
*is*: its declaration, its wire types, and its cron arithmetic. It names no Redis command
and starts nothing.

**Cron.** Parsed by croniter (`CRON_FIELDS`): five fields are the classic minute-resolution
`minute hour day month weekday`; six fields put the **second first**
(`second minute hour day month weekday`, croniter's `second_at_beginning`, as Quartz,
Spring and node-cron write it), so "every second" is `* * * * * *` and "every 5 s"
`*/5 * * * * *`. The `@hourly`-style aliases work too. Ticks are whole seconds, computed in
the schedule's IANA time zone (default `UTC`), so `0 9 * * *` in `Europe/Paris` is 09:00
there, summer and winter. An expression that never matches (`0 0 30 2 *`) is refused.

**Missed ticks.** A tick started up to `MAJORDOMUS_SCHEDULE_GRACE` seconds (default 10)
after its time is merely late, and is started as every tick is. Ticks older than that which
nobody started (every worker was down) are *missed*: `missed="once"` (the default) starts
one execution for all of them, keyed by the latest, with a `schedule.missed` diagnostic;
`missed="skip"` starts none. Ticks that fell while a schedule was paused are neither: resume
starts from its own time.
"""

from __future__ import annotations

import contextlib
import functools
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.clock import stamp_of
from majordomus.errors import MajordomusError, invalid_input
from majordomus.priorities import Priority
from majordomus.schemas import PROBLEMS

if TYPE_CHECKING:
    from croniter import croniter

Missed = Literal["once", "skip"]
"""What a schedule does with ticks missed while nothing ran: start one for them, or none."""
Origin = Literal["declared", "created"]
"""Where a schedule comes from: a capability's declaration, or `schedules.create`."""

CRON_FIELDS = (5, 6)
"""Fields a cron expression may have: 5 (minute first) or 6 (second first)."""

MISSED_CODE = "schedule.missed"
"""The code of the diagnostic on the execution that stands for missed ticks."""

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" for c in word)


def _cron_field(value: str, alone: tuple[str, ...] = ()) -> str:
    """A cron field: a list of `*`, values and ranges, each with an optional `/step`, or one
    of `alone` as the whole field."""
    step = r"(/[1-9][0-9]?)"
    item = rf"(\*{step}?|({value})(-({value}))?{step}?)"
    return rf"({item}(,{item})*" + "".join(f"|{a}" for a in alone) + ")"


_MONTHS = "|".join(_any_case(m) for m in "jan feb mar apr may jun jul aug sep oct nov dec".split())
_DAYS = "|".join(_any_case(d) for d in "sun mon tue wed thu fri sat".split())
_SIXTY = _cron_field(r"[1-5]?[0-9]")
_FIVE = r"[ \t]+".join(
    (
        _SIXTY,  # minute
        _cron_field(r"1?[0-9]|2[0-3]"),  # hour
        _cron_field(r"[12][0-9]|3[01]|[1-9]", ("L", r"\?")),  # day of the month
        _cron_field(rf"1[0-2]|[1-9]|{_MONTHS}"),  # month
        _cron_field(rf"[0-7]|{_DAYS}", (r"\?",)),  # day of the week
    )
)
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_PATTERN = rf"^[ \t]*({'|'.join(CRON_ALIASES)}|({_SIXTY}[ \t]+)?{_FIVE})[ \t]*$"
"""What a cron expression may be, as the schema of `schedules.create` says it: 5 fields or 6
(the seconds first) of values in range, names of months and days in any case, `*`, ranges,
lists and steps, `L` and `?` for the day of the month, `?` for the weekday; or an alias.
Every expression it matches is one croniter reads (what `check_cron` checks), so a
request that fits the schema is not refused for its cron, but for the rare one that never
ticks (`0 0 30 2 *`); croniter's rarer forms (`5#2`, `H`) are outside it."""

Cron = Annotated[
    str,
    msgspec.Meta(
        pattern=CRON_PATTERN,
        extra_json_schema={
            PROBLEMS: {
                "pattern": "is not valid cron: not 5 or 6 fields (minute hour day month "
                "weekday, the seconds first when 6) of values in range, nor an alias such "
                "as @hourly"
            }
        },
    ),
]
"""A cron expression (`CRON_PATTERN`), as an input takes one."""


def known_time_zones() -> list[str]:
    """The time zones this process can read (`zone`): the system's tz database or the
    `tzdata` package, and `UTC`, which needs neither."""
    from zoneinfo import available_timezones

    return sorted(available_timezones() | {"UTC"})


TimeZone = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "enum": known_time_zones(),
            PROBLEMS: {
                "enum": "is not a time zone this server knows (an IANA name such as UTC, "
                "Europe/Paris or America/New_York)"
            },
        }
    ),
]
"""An IANA time zone this process knows, as an input takes one: the schema lists them."""


ScheduleName = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)]
"""Letters, digits, '_' and '-', at most 64: the schedule's id is `<capability id>:<name>`."""
ScheduleId = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
"""A schedule's id, `<capability id>:<name>` (as `schedules.list` shows it)."""


@dataclass(frozen=True)
class Schedule:
    """A declared schedule: `@capability(..., schedules=[Schedule("*/5 * * * *")])`.

    Checked when it is made (a bad cron, time zone or name stops start-up); its input is
    checked against its capability's when the workers start.
    """

    cron: str
    """Five fields (minute first) or six (second first): `*/5 * * * * *` is every 5 s."""
    timezone: str = "UTC"
    """The IANA time zone its ticks are computed in."""
    input: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The input of every execution it starts."""
    missed: Missed = "once"
    """Ticks missed while nothing ran: `once` starts one execution for them, `skip` none."""
    name: str | None = None
    """Its id is `<capability id>:<name>`; unnamed: `<capability id>:<index>` (its place
    in the capability's list, so name a schedule whose place may change)."""
    priority: Priority | None = None
    """The priority of its executions; None: the capability's."""

    def __post_init__(self) -> None:
        check_cron(self.cron, self.timezone)
        if self.missed not in ("once", "skip"):
            raise invalid_input(f"missed={self.missed!r} is neither 'once' nor 'skip'")
        if self.name is not None and not re.match(NAME_PATTERN, self.name):
            raise invalid_input(f"the schedule name {self.name!r} does not match {NAME_PATTERN}")


# -- wire types -------------------------------------------------------------------------------


class ScheduleDefinition(msgspec.Struct, omit_defaults=True):
    """What a schedule starts and when, as stored (its input unredacted: the worker needs it)."""

    capability: str
    cron: str
    timezone: str = "UTC"
    input: dict[str, Any] = {}
    missed: Missed = "once"
    name: str | None = None
    priority: Priority | None = None


class ScheduleView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A schedule as `schedules.*` answer it."""

    id: str
    capability: str
    cron: str
    timezone: str
    input: dict[str, Any]
    """The input of every execution it starts (redacted as theirs are)."""
    missed: Missed
    origin: Origin
    paused: bool
    created_at: str
    name: str | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET
    paused_at: str | UnsetType = UNSET
    next_tick_at: str | UnsetType = UNSET
    """Its next tick (absent while paused)."""
    next_ticks: list[str] | UnsetType = UNSET
    """Its next `NEXT_TICKS_SHOWN` ticks, the first being `next_tick_at` (absent while paused)."""
    last_tick_at: str | UnsetType = UNSET
    """The last tick it started an execution for."""
    last_execution: str | UnsetType = UNSET
    """That execution."""


@dataclass(frozen=True)
class StoredSchedule:
    """One schedule as the store holds it: its definition and its state."""

    id: str
    definition: ScheduleDefinition
    origin: Origin
    created_at: str
    since_ms: int
    """When it last became active (created, or resumed): no tick before it is due."""
    paused_at: str | None = None
    last_tick_ms: int | None = None
    last_execution: str | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def cursor_ms(self) -> int:
        """Every tick up to this one is done (started, missed, or before it was active)."""
        return max(self.last_tick_ms or 0, self.since_ms)


def declared_id(capability: str, schedule: Schedule, index: int) -> str:
    return f"{capability}:{schedule.name if schedule.name is not None else index}"


def created_id(capability: str, name: str | None) -> str:
    return f"{capability}:{name if name is not None else secrets.token_hex(4)}"


def definition_of(capability: str, schedule: Schedule) -> ScheduleDefinition:
    return ScheduleDefinition(
        capability=capability,
        cron=schedule.cron,
        timezone=schedule.timezone,
        input=dict(schedule.input),
        missed=schedule.missed,
        name=schedule.name,
        priority=schedule.priority,
    )


# -- cron arithmetic ---------------------------------------------------------------------------


@functools.cache
def zone(name: str) -> tzinfo:
    """The time zone named `name`, or `invalid_input` naming the problem. Zones come from
    the system's tz database (or the `tzdata` package); `UTC` needs neither."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name == "UTC":
        return UTC

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise invalid_input(
            f"{name!r} is not a time zone this server knows",
            "name an IANA time zone, such as UTC, Europe/Paris or America/New_York",
        ) from None


def _iterator(cron: str, timezone: str, start_ms: int) -> croniter:
    from croniter import croniter

    start = datetime.fromtimestamp(start_ms / 1000, tz=UTC).astimezone(zone(timezone))
    return croniter(cron, start, second_at_beginning=True)


def check_cron(cron: str, timezone: str = "UTC") -> None:
    """`invalid_input` unless `cron` is an expression croniter reads that ticks at least
    once, and `timezone` a zone this server knows."""
    from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError

    zone(timezone)
    text = cron.strip()
    fields = len(text.split())
    suggestion = (
        "write 5 fields (minute hour day month weekday, e.g. '*/5 * * * *') or 6 with the "
        "seconds first (e.g. '* * * * * *' for every second), or an alias such as '@hourly'"
    )
    if not text or (not text.startswith("@") and fields not in CRON_FIELDS):
        raise invalid_input(
            f"the cron expression {cron!r} has {fields} field{'s' if fields != 1 else ''}, "
            "not 5 or 6",
            suggestion,
        )
    try:
        _iterator(text, timezone, 0).get_next(float)
    except CroniterBadDateError:
        raise invalid_input(
            f"the cron expression {cron!r} never ticks", "check its day and month fields"
        ) from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        raise invalid_input(
            f"the cron expression {cron!r} is not valid: {exc}", suggestion
        ) from None


def next_tick_ms(cron: str, timezone: str, after_ms: int) -> int:
    """The first tick strictly after `after_ms` (epoch ms), in epoch ms."""
    return int(round(_iterator(cron, timezone, after_ms).get_next(float) * 1000))


NEXT_TICKS_SHOWN = 5
"""How many coming ticks a schedule's view lists (`ScheduleView.next_ticks`)."""


def next_ticks_ms(cron: str, timezone: str, after_ms: int, count: int = NEXT_TICKS_SHOWN) -> list[int]:
    """The first `count` ticks strictly after `after_ms` (epoch ms), in epoch ms."""
    it = _iterator(cron, timezone, after_ms)
    return [int(round(it.get_next(float) * 1000)) for _ in range(count)]


def last_tick_at_or_before(cron: str, timezone: str, at_ms: int) -> int:
    """The latest tick at or before `at_ms` (epoch ms), in epoch ms. Ticks are whole
    seconds: the one at `at_ms`'s own second, if any, counts."""
    second = at_ms // 1000
    return int(round(_iterator(cron, timezone, (second + 1) * 1000).get_prev(float) * 1000))


@dataclass(frozen=True)
class Due:
    """What a schedule has to start now (`due_ticks`)."""

    missed: int | None = None
    """The latest tick older than the grace that nobody started (None: none missed)."""
    missed_count: int = 0
    """How many ticks were missed, counted up to `MISSED_COUNT_BOUND` (then "at least")."""
    late: tuple[int, ...] = ()
    """Ticks within the grace, oldest first: each is started."""


MISSED_COUNT_BOUND = 1000
"""Missed ticks are counted one by one (for the diagnostic) up to this many."""
LATE_BOUND = 100
"""Ticks within the grace answered by one `due_ticks` at most, the oldest first (a schedule
of every second has 11 at the default grace); the rest are the next call's."""


def due_ticks(cron: str, timezone: str, cursor_ms: int, now_ms: int, grace_ms: int) -> Due:
    """The ticks after `cursor_ms` (everything up to it is done) that are due at `now_ms`:
    those at most `grace_ms` old each to be started, the older ones missed."""
    first = next_tick_ms(cron, timezone, cursor_ms)
    if first > now_ms:
        return Due()
    edge = now_ms - grace_ms
    if first >= edge:
        return Due(late=_ticks_from(cron, timezone, first, now_ms))
    latest_missed = last_tick_at_or_before(cron, timezone, edge - 1)
    return Due(
        missed=latest_missed,
        missed_count=_count(cron, timezone, first, latest_missed),
        late=_ticks_from(cron, timezone, next_tick_ms(cron, timezone, edge - 1), now_ms),
    )


def _ticks_from(cron: str, timezone: str, first: int, until_ms: int) -> tuple[int, ...]:
    """`first` (a tick) and the ticks after it up to `until_ms`, at most `LATE_BOUND`."""
    ticks: list[int] = []
    it = _iterator(cron, timezone, first)
    tick = first
    while tick <= until_ms and len(ticks) < LATE_BOUND:
        ticks.append(tick)
        tick = int(round(it.get_next(float) * 1000))
    return tuple(ticks)


def _count(cron: str, timezone: str, first: int, last: int) -> int:
    """How many ticks from `first` to `last` (both ticks), up to `MISSED_COUNT_BOUND`."""
    count, tick = 1, first
    it = _iterator(cron, timezone, first)
    while tick < last and count < MISSED_COUNT_BOUND:
        tick = int(round(it.get_next(float) * 1000))
        count += 1
    return count


def view_of(stored: StoredSchedule, shown_input: dict[str, Any], now_ms: int) -> ScheduleView:
    """`stored` as `schedules.*` answer it, its input as it may be shown (redacted)."""
    d = stored.definition
    view = ScheduleView(
        id=stored.id,
        capability=d.capability,
        cron=d.cron,
        timezone=d.timezone,
        input=shown_input,
        missed=d.missed,
        origin=stored.origin,
        paused=stored.paused,
        created_at=stored.created_at,
    )
    if d.name is not None:
        view.name = d.name
    if d.priority is not None:
        view.priority = d.priority
    if stored.paused_at is not None:
        view.paused_at = stored.paused_at
    else:
        with contextlib.suppress(MajordomusError):  # a zone this process lacks: no next tick
            ticks = next_ticks_ms(d.cron, d.timezone, max(stored.cursor_ms, now_ms))
            view.next_tick_at = stamp_of(ticks[0])
            view.next_ticks = [stamp_of(t) for t in ticks]
    if stored.last_tick_ms is not None:
        view.last_tick_at = stamp_of(stored.last_tick_ms)
    if stored.last_execution:
        view.last_execution = stored.last_execution
    return view
