"""The executions' per-minute roll-up, as the charts read it (`executions.stats`).

The roll-up is written by the scripts that move an execution, in the step that moves it
(`lua/rollup.lua`, put into `take.lua` and `append.lua`): a start is counted by its wait
(from when it was due: created, or its `start_at`, to started), an end by its final state
and its duration (started to ended). So a count costs no round trip of its own, and is
there exactly when its move is: a script runs whole or not at all, and a call sent again
after a lost answer is answered from its token without counting again. The key layout
(one hash a partition a minute, its fields, its expiry) is `keys.Partition.rollup`'s; each
minute is kept `rollup_keep_seconds` after it (25 h: the day the charts show), and with
that setting 0 nothing is counted at all.

A duration or a wait is kept as a bucket of a histogram: `ROLLUP_STEPS` buckets per
doubling of milliseconds, so a minute's hash holds at most a few dozen fields per
capability whatever the traffic, and a percentile of any span is read from the sum of its
minutes' buckets (`percentile`), within a bucket's width. This module reads the minutes,
summed over the partitions, and keeps the sums of the steps that are final (a minute of
Redis's clock takes no count once that clock has left it); it writes nothing, and knows
nothing of the series a surface shows (`majordomus.stats`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.connect import RedisClient
from majordomus.store.keys import ROLLUP_STEPS

PER_LN = ROLLUP_STEPS / math.log(2)
"""The buckets per unit of ln(ms), computed as `lua/rollup.lua` computes it."""

END_KINDS = {"s": "succeeded", "f": "failed", "c": "cancelled"}
"""An end's field kind, by the final state it counts."""
WAIT_KIND = "w"
NO_MEASURE = "-"
"""The bucket of an end that never started (cancelled or failed while queued)."""


def bucket_of(ms: float) -> int:
    """The histogram bucket of `ms` milliseconds: 0 under 1 ms, else 1 + floor(ln(ms) *
    `PER_LN` + 1e-6), the operations `lua/rollup.lua` does, in its order (so both agree;
    the 1e-6 puts a bucket's lower bound, as 8 ms, in it, which rounding would miss)."""
    if ms < 1:
        return 0
    return 1 + math.floor(math.log(ms) * PER_LN + 1e-6)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The milliseconds bucket `bucket` holds: [low, high)."""
    if bucket <= 0:
        return 0.0, 1.0
    return 2 ** ((bucket - 1) / ROLLUP_STEPS), 2 ** (bucket / ROLLUP_STEPS)


def percentile(histogram: Counter[int], q: float) -> float | None:
    """The `q`-quantile (0 < q < 1) of a histogram's milliseconds, interpolated within the
    bucket it falls in; None when the histogram is empty."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for bucket in sorted(histogram):
        count = histogram[bucket]
        if seen + count >= rank:
            low, high = bucket_bounds(bucket)
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return bucket_bounds(max(histogram))[1]  # pragma: no cover (rank <= total always lands)


@dataclass
class Tally:
    """One capability's counts over some minutes."""

    waits: Counter[int] = field(default_factory=Counter)
    """Starts, by the bucket of their wait."""
    durations: Counter[int] = field(default_factory=Counter)
    """Ends that had started, by the bucket of their duration."""
    ends: Counter[str] = field(default_factory=Counter)
    """Ends by final state (`succeeded`, `failed`, `cancelled`), started or not."""

    @property
    def started(self) -> int:
        return sum(self.waits.values())

    def add(self, other: Tally) -> None:
        self.waits.update(other.waits)
        self.durations.update(other.durations)
        self.ends.update(other.ends)

    def count(self, kind: str, bucket: str, n: int) -> None:
        """Add a field of the stored hash (`kind`, `bucket`) counted `n` times."""
        if kind == WAIT_KIND:
            self.waits[int(bucket)] += n
            return
        state = END_KINDS.get(kind)
        if state is None:
            return  # a kind a newer writer knows: not this reader's to show
        self.ends[state] += n
        if bucket != NO_MEASURE:
            self.durations[int(bucket)] += n


Minute = dict[str, Tally]
"""One minute's tallies, by capability."""


def parse_minute(raw: dict[bytes, int], into: Minute | None = None) -> Minute:
    """A stored minute's hash (or the sum of several) as tallies by capability (added to
    `into` when given)."""
    tallies: Minute = {} if into is None else into
    for name, value in raw.items():
        kind, bucket, capability = name.decode().split(":", 2)
        tally = tallies.get(capability)
        if tally is None:
            tally = tallies[capability] = Tally()
        tally.count(kind, bucket, int(value))
    return tallies


SETTLED_MINUTES = 2
"""How far behind the reader's clock a minute is final: every count goes in a minute of
Redis's clock (`lua/rollup.lua`), so one Redis's clock has left takes no more; two minutes
leave a minute for the reader's clock and Redis's (each node's, on a cluster) to differ."""


class RollupStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._settled: dict[tuple[int, int], Minute] = {}
        """The sums of steps read once they were final, by (step, first minute): at most a
        window's worth of each step size (older ones go as the window moves on)."""

    async def rollup_steps(
        self, first: int, step: int, count: int, settled_before: int | None = None
    ) -> list[Minute]:
        """`count` steps of `step` minutes from the minute `first` (epoch minutes), each the
        sum of its minutes in every partition: one pipeline of a HGETALL a partition a minute
        (on a Redis Cluster, sent to each partition's node). The stored fields of a step are
        summed before they are read (a day of busy minutes holds half a million fields, a
        step's sum a few hundred). A step that ends before the minute `settled_before` is
        final: its sum is kept and not read again (the last day, read every minute, reads
        its last one or two quarters of an hour again, not its 1,440 minutes)."""
        settled = {k: v for k, v in self._settled.items() if k[0] != step or k[1] >= first}
        self._settled = settled
        starts = [first + i * step for i in range(count)]
        wanted = [s for s in starts if (step, s) not in settled]
        async with self.redis.pipeline(transaction=False) as pipe:
            for start in wanted:
                for minute in range(start, start + step):
                    for part in self.keys.partitions:
                        pipe.hgetall(part.rollup(minute))
            raw = await pipe.execute() if wanted else []
        per = step * self.keys.partition_count
        read: dict[int, Minute] = {}
        for i, start in enumerate(wanted):
            sums: dict[bytes, int] = {}
            for stored in raw[i * per : (i + 1) * per]:
                for name, value in stored.items():
                    sums[name] = sums.get(name, 0) + int(value)
            read[start] = parse_minute(sums)
            if settled_before is not None and start + step <= settled_before:
                settled[(step, start)] = read[start]
        return [read[s] if s in read else settled[(step, s)] for s in starts]

    async def rollup_minutes(self, first: int, last: int) -> dict[int, Minute]:
        """The minutes `first` to `last` (both included) that counted anything, read whole."""
        minutes = await self.rollup_steps(first, 1, last - first + 1)
        return {first + i: tallies for i, tallies in enumerate(minutes) if tallies}
