"""The executions over time: the answer of `executions.stats` (the console's charts,
`majordomus stats`, `GET /api/v1/stats`).

Throughput (starts, and ends by final state) and the 50th and 95th percentiles of the wait
(due to started) and of the duration (started to ended), over the last hour a minute a
point, or over the last day a quarter of an hour a point, for every capability together
and for each one. Read from the store's per-minute roll-up (`majordomus.store.rollup`) at
one moment; nothing here counts or writes. Every series has one point per step of its
span, empty steps included (zero counts, no percentile), so a reader draws it as it comes.

Bounded: 60 or 96 points a series, and the `STATS_CAPABILITIES` busiest capabilities (by
starts and ends over the span), the rest counted in `more_capabilities`; one capability's
series alone when `capability` names it. A percentile is read from histogram buckets a
factor of 2^(1/4) wide (`keys.ROLLUP_STEPS`), interpolated within its bucket: exact to a
bucket, about 9 % either way.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal

import msgspec

from majordomus.clock import now_stamp, stamp_of

if TYPE_CHECKING:
    # The store (and Redis's client with it) is loaded by a read, not by declaring the
    # built-in: `majordomus --help` declares every built-in.
    from majordomus.engine import Engine
    from majordomus.store.rollup import Minute, Tally

Span = Literal["hour", "day"]

STEP_MINUTES: dict[str, int] = {"hour": 1, "day": 15}
"""Minutes a point of each span covers."""
POINTS = {"hour": 60, "day": 96}
"""Points of each span: the last hour a minute a point, the last day a quarter hour a point
(the last point is the step under way)."""
STATS_CAPABILITIES = 20
"""Capabilities a report gives a series of, the busiest first; the rest are counted in
`more_capabilities` (ask for one by name with `capability`)."""


class StatsPoint(msgspec.Struct):
    """One step of a series (or, as a series' `total`, its whole span)."""

    at: str
    """When the step begins, RFC 3339 UTC."""
    started: int
    """Executions started in the step (taken by a worker)."""
    succeeded: int
    failed: int
    cancelled: int
    """Executions ended in the step, by final state (a cancelled one that never started
    among them)."""
    wait_p50_ms: float | None
    wait_p95_ms: float | None
    """Of the starts of the step: how long each waited, from when it was due (created, or
    its `start_at`) to started; None without a start."""
    duration_p50_ms: float | None
    duration_p95_ms: float | None
    """Of the ends of the step that had started: started to ended; None without one."""


class StatsSeries(msgspec.Struct):
    capability: str | None
    """The capability counted; None: every capability together."""
    total: StatsPoint
    """The whole span as one step (`at` its start)."""
    points: list[StatsPoint]
    """One a step, oldest first; the last is the step under way."""


class ExecutionStats(msgspec.Struct):
    """The answer of `executions.stats`."""

    span: Span
    step_seconds: int
    since: str
    """When the first step begins, RFC 3339 UTC."""
    until: str
    """When the answer was read."""
    overall: StatsSeries
    """Every capability together (only the one asked for, when `capability` names one)."""
    capabilities: list[StatsSeries]
    """Each capability that started or ended an execution in the span, the busiest first."""
    more_capabilities: int = 0
    """Capabilities left out past `STATS_CAPABILITIES`."""


def _point(at_ms: int, tally: Tally) -> StatsPoint:
    from majordomus.store.rollup import percentile

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return StatsPoint(
        at=stamp_of(at_ms),
        started=tally.started,
        succeeded=tally.ends["succeeded"],
        failed=tally.ends["failed"],
        cancelled=tally.ends["cancelled"],
        wait_p50_ms=ms(percentile(tally.waits, 0.5)),
        wait_p95_ms=ms(percentile(tally.waits, 0.95)),
        duration_p50_ms=ms(percentile(tally.durations, 0.5)),
        duration_p95_ms=ms(percentile(tally.durations, 0.95)),
    )


def _series(capability: str | None, steps: list[Minute], first: int, step: int) -> StatsSeries:
    """The series of one capability (None: all of them) over the steps from `first`."""
    from majordomus.store.rollup import Tally

    mine = [Tally() for _ in steps]
    for tally, tallies in zip(mine, steps, strict=True):
        for name, counted in tallies.items():
            if capability is None or name == capability:
                tally.add(counted)
    total = Tally()
    for tally in mine:
        total.add(tally)
    return StatsSeries(
        capability=capability,
        total=_point(first * 60_000, total),
        points=[_point((first + i * step) * 60_000, t) for i, t in enumerate(mine)],
    )


async def execution_stats(engine: Engine, span: Span, capability: str | None) -> ExecutionStats:
    """The report of the last `span`, of every capability or of `capability` alone."""
    from majordomus.store.rollup import SETTLED_MINUTES

    until, now_ms = now_stamp()
    step, points = STEP_MINUTES[span], POINTS[span]
    last_step = now_ms // 60_000 // step
    first = (last_step - points + 1) * step
    settled_before = now_ms // 60_000 - SETTLED_MINUTES + 1
    steps = await engine.store.rollup_steps(first, step, points, settled_before)
    busy: Counter[str] = Counter()
    for tallies in steps:
        for name, tally in tallies.items():
            if capability is None or name == capability:
                busy[name] += tally.started + sum(tally.ends.values())
    names = [name for name, _ in busy.most_common()]
    if capability is not None:
        names = [capability]
    shown = names[:STATS_CAPABILITIES]
    return ExecutionStats(
        span=span,
        step_seconds=step * 60,
        since=stamp_of(first * 60_000),
        until=until,
        overall=_series(capability, steps, first, step),
        capabilities=[_series(name, steps, first, step) for name in shown],
        more_capabilities=len(names) - len(shown),
    )
