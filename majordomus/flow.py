"""Flow control a capability declares: concurrency per key, fairly between keys, and rate
limits (`RateLimit`, below).

`@capability(..., per_key=PerKey("tenant", 2))`: at most 2 executions of the capability run
at once for each value of its input's `tenant`, across every worker. The key is a top-level
input member of a scalar type (a string, an integer, a boolean, or an enumeration of them),
not sensitive (its value is written into key names), so every start chooses its key by its
input; an input whose member is null or absent counts under the key `null`.

**How it holds, and why it is fair.** The key's slots live beside its executions: on a
Redis Cluster every execution of one (capability, key) is created in one partition (the
key picks it, as an idempotency key does), so the limit is exact across workers. A start
is *admitted* into the ready queue only while its key has a slot free (a queued admitted
one holds its slot, so a burst of 10,000 admits N); the others wait in the key's own
waiting list, out of the queue: they hold no worker slot and cost no Redis traffic while
they wait. The terminal event of one of the key's executions moves the key's next waiting
one (its oldest, by its place in line: priority, then creation) to the back of the queue.
The queue thus holds N of any key (one whose slot's lease ran out while it waited, a
lease being `lease_seconds`, lets its key admit one more), so between keys the slots go
round-robin: one execution of a quiet key waits behind about N of each busy key, never
behind their backlogs. The take checks the key's slots again (a queued one whose slot lapsed meanwhile,
a delayed one come due), and holds back what is over the limit in the same way.

**With the capability-wide `max_concurrency`**, both hold: the key admits first, then the
capability's limit runs what was admitted, oldest first; its waiting list holds N of any
key (as long as each waits less than a lease), so it is fair between keys too. **With priorities**, a key's waiting ones leave
it by their place in line (a `high` one before a `normal` one of the same key); between
keys the queue's order rules as always.

**Debounce and throttle** collapse the starts of one key within a window into one
execution; every start's answer is the snapshot of the execution that carries it, so none
is dropped unseen. `collapse=Throttle("tenant", seconds=2.0)`: the first start of a key
opens a window of 2 s; every start of the key in it answers that execution (whatever its
input), which runs once with the first input. `collapse=Debounce("tenant", seconds=2.0)`:
the first start of a key makes an execution due 2 s later (a delayed start); each later
start while it is still waiting gives it its input and pushes it to 2 s after itself, so it
runs once the key has been quiet for the window, with the last input (it gets a
`debounce.replaced` diagnostic each time). Once it has come due, the next start opens a new
window. An execution's `collapsed` counts the starts collapsed into it: a start's answer
with `collapsed` above 0 is one that was. The key is chosen as `PerKey`'s is (and names the
same member when both are declared); an idempotency key is checked first (a start whose key
is held answers its holder, as always), and one the collapse answers is then held by the
carrying execution. A retried attempt is never collapsed. The window's record is kept
beside the idempotency keys, written in the create's one step (`create.lua`).

This module declares and computes a start's key; it names no Redis command (the slots and
lists are `majordomus.store.keys`', moved by `create.lua`, `take.lua`, `append.lua` and
`release_slot.lua`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from majordomus.model import ExecutionDiagnostic
from majordomus.search import SearchableError, check_searchable, value_text

NULL_KEY = "null"
"""The key of an input whose key member is null or absent."""


class FlowError(ValueError):
    """A flow control declared wrongly; raised at declaration (start-up)."""


def key_of(member: str, plain: Any) -> str:
    """The key of an input (its builtins form: a dict) by its member `member`, as it is
    written in key names: `majordomus.search.value_text` of its value (a long one hashed)."""
    value = plain.get(member) if isinstance(plain, dict) else None
    text = value_text(value)
    return NULL_KEY if text is None else text


def _check_member(cap_id: str, input_type: Any, member: str, what: str) -> None:
    """`FlowError` unless `member` can key a start: a top-level input member of a scalar
    type, not sensitive (the rules of a searchable member, `check_searchable`)."""
    try:
        check_searchable(cap_id, input_type, (member,))
    except SearchableError as exc:
        raise FlowError(str(exc).replace("searchable", what, 1)) from exc


@dataclass(frozen=True)
class PerKey:
    """At most `limit` executions of the capability run at once per value of the input
    member `member`, the slots going round-robin between keys (`majordomus.flow`)."""

    member: str
    limit: int

    def key_of(self, plain: Any) -> str:
        return key_of(self.member, plain)

    def view(self) -> dict[str, Any]:
        return {"member": self.member, "limit": self.limit}


def check_per_key(cap_id: str, input_type: Any, per_key: PerKey | None) -> PerKey | None:
    """`per_key` as declared, or `FlowError` saying what is wrong with it."""
    if per_key is None:
        return None
    if not isinstance(per_key, PerKey):
        raise FlowError(f"per_key of {cap_id!r} must be a PerKey(member, limit)")
    if isinstance(per_key.limit, bool) or not isinstance(per_key.limit, int) or per_key.limit < 1:
        raise FlowError(
            f"per_key limit {per_key.limit!r} of {cap_id!r} must be a whole number of at least 1"
        )
    _check_member(cap_id, input_type, per_key.member, "per_key member")
    return per_key


PERIOD_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000}
"""The periods a rate limit may be given per, in ms."""


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` starts to running per `per` (a second, a minute or an hour), spaced
    evenly, with `burst` of them at once after a quiet spell (1: none); globally, or for each
    value of the input member `key` (`majordomus.flow`).

    A generic cell rate algorithm (a token bucket kept as the time its next token is due),
    kept in Redis, timed by Redis's clock and checked in the take: none starts before its
    turn, so in any span of `s` ms at most `burst + (s + 1) * limit / per_ms` of them start
    (the clock is read in whole ms: a millisecond's worth may start within one). An execution over the limit is given its
    turn at once (the bucket's time moves on for it) and waits for it as a delayed start
    does (no slot held, no polling), its `due_at` saying until when, an `execution.diagnostic`
    (`rate_limit.held`) saying why."""

    limit: int
    per: str = "second"
    key: str | None = None
    burst: int = 1

    @property
    def interval_ms(self) -> float:
        """The ms between two starts at the limit's pace."""
        return PERIOD_MS[self.per] / self.limit

    @property
    def tolerance_ms(self) -> float:
        """How far ahead of the pace a start may be: `burst - 1` intervals."""
        return (self.burst - 1) * self.interval_ms

    def key_of(self, plain: Any) -> str | None:
        """The bucket's key of an input (None: one bucket for all)."""
        return None if self.key is None else key_of(self.key, plain)

    def view(self) -> dict[str, Any]:
        return {"limit": self.limit, "per": self.per, "key": self.key, "burst": self.burst}


def check_rate_limit(
    cap_id: str, input_type: Any, rate: RateLimit | None, per_key: PerKey | None
) -> RateLimit | None:
    """`rate` as declared, or `FlowError` saying what is wrong with it. A rate limit per key
    and a `per_key` limit of one capability name one member (a key's executions live in one
    partition, with both its slots and its bucket)."""
    if rate is None:
        return None
    if not isinstance(rate, RateLimit):
        raise FlowError(f"rate_limit of {cap_id!r} must be a RateLimit(limit, per, key, burst)")
    for name, value in (("limit", rate.limit), ("burst", rate.burst)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FlowError(
                f"rate_limit {name} {value!r} of {cap_id!r} must be a whole number of at least 1"
            )
    if rate.per not in PERIOD_MS:
        raise FlowError(
            f"rate_limit per {rate.per!r} of {cap_id!r} must be one of {', '.join(PERIOD_MS)}"
        )
    if rate.key is not None:
        _check_member(cap_id, input_type, rate.key, "rate_limit key")
        if per_key is not None and per_key.member != rate.key:
            raise FlowError(
                f"rate_limit key {rate.key!r} and per_key member {per_key.member!r} of {cap_id!r} "
                "differ: a capability's limits per key name one member"
            )
    return rate


REPLACED_CODE = "debounce.replaced"
"""The diagnostic code of a debounced execution whose input a later start replaced."""


@dataclass(frozen=True)
class _Collapse:
    """What debounce and throttle share: the member whose value keys a start, the window."""

    member: str
    seconds: float
    kind: ClassVar[str]

    @property
    def window_ms(self) -> int:
        return round(self.seconds * 1000)

    def key_of(self, plain: Any) -> str:
        return key_of(self.member, plain)

    def view(self) -> dict[str, Any]:
        return {"kind": self.kind, "member": self.member, "seconds": self.seconds}


@dataclass(frozen=True)
class Debounce(_Collapse):
    """Starts of one value of the input member `member` collapse into one execution, which
    runs once the key has been quiet for `seconds`, with the last start's input."""

    kind: ClassVar[str] = "debounce"


@dataclass(frozen=True)
class Throttle(_Collapse):
    """At most one execution per `seconds` for one value of the input member `member`, with
    the window's first start's input; the window's other starts answer it."""

    kind: ClassVar[str] = "throttle"


COLLAPSES: dict[str, type[Debounce] | type[Throttle]] = {"debounce": Debounce, "throttle": Throttle}
"""Each collapse by its kind, as it is published (`majordomus.declarations`)."""


def check_collapse(
    cap_id: str, input_type: Any, collapse: Debounce | Throttle | None, keyed_by: tuple[str, ...]
) -> Debounce | Throttle | None:
    """`collapse` as declared, or `FlowError` saying what is wrong with it. `keyed_by`: the
    members the capability's other limits per key name, which it must name too (a key's
    executions live in one partition, its window's record with them)."""
    if collapse is None:
        return None
    if not isinstance(collapse, (Debounce, Throttle)):
        raise FlowError(
            f"collapse of {cap_id!r} must be a Debounce(member, seconds) or a "
            "Throttle(member, seconds)"
        )
    seconds = collapse.seconds
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise FlowError(f"{collapse.kind} seconds {seconds!r} of {cap_id!r} must be a number")
    if not math.isfinite(seconds) or seconds < 0.001:
        raise FlowError(
            f"{collapse.kind} seconds {seconds!r} of {cap_id!r} must be at least 0.001 (a ms)"
        )
    _check_member(cap_id, input_type, collapse.member, f"{collapse.kind} member")
    for other in keyed_by:
        if other != collapse.member:
            raise FlowError(
                f"{collapse.kind} member {collapse.member!r} of {cap_id!r} differs from "
                f"{other!r}, which its other limits per key name: they must name one member"
            )
    return collapse


def replaced_diagnostic(carries: int, due_at: str) -> ExecutionDiagnostic:
    """The `debounce.replaced` diagnostic of a debounced execution a later start replaced
    the input of: how many starts it now carries, and when it is due."""
    return ExecutionDiagnostic(
        "info",
        REPLACED_CODE,
        f"a later start of the same key replaced its input; it now carries {carries} starts",
        f"it runs with the last start's input once the key has been quiet: due at {due_at}",
    )
