"""Priorities: three levels, and how each orders the queue without starving the others.

The queue of work ready to run is one sorted set scored by when each entry became ready,
less its level's head start: `high` stands `aging` earlier in line than it came, `low`
`aging` later (`MAJORDOMUS_PRIORITY_AGING_SECONDS`, default 300). So higher levels are taken
first, entries of one level first come first served, and a `low` entry is never starved:
once it has waited `2 x aging`, it is ahead of every `high` entry that arrives after it.
One sorted set, one `ZRANGE` from its head: a priority costs nothing to take.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, get_args

Priority = Literal["low", "normal", "high"]

PRIORITIES: tuple[str, ...] = get_args(Priority)

HEAD_START = {"low": -1, "normal": 0, "high": 1}
"""How many `aging` periods earlier than it came each level stands in line."""


@lru_cache(maxsize=64)
def tie_rank(priority: str, aging_ms: int) -> int:
    """The rank of a level's head start among the levels' (0: the lowest; levels whose
    head starts are equal, as when `aging_ms` is 0, share one). Two entries on one place
    created in different milliseconds are of different levels, and the one created first
    has the lower head start: `create.lua` orders the entries of a place by this rank, then
    by their order of creation within the millisecond, in the fraction of their score."""
    heads = sorted({HEAD_START[p] * aging_ms for p in PRIORITIES})
    return heads.index(HEAD_START[priority] * aging_ms)


def queue_score(ready_ms: int, priority: str, aging_ms: int) -> int:
    """The place in the ready queue of an entry ready at `ready_ms` (epoch ms)."""
    return ready_ms - HEAD_START[priority] * aging_ms
