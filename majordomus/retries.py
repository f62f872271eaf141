"""Retry policies: what a capability declares, which failures it retries, how long it waits,
and how the next attempt of a retry chain is started.

**Each attempt is an execution of its own.** A failed attempt keeps its own history and
its own final state (`failed`, which never moves again); the next attempt is a new
execution of the same capability, input, actor, episode and priority, linked both ways
(`retry_of` on the new one, `retried_as` on the failed one, written by the store in the one
step that creates it), due after the backoff. While it waits it is `queued` with a
`due_at`: in the store's delayed set, holding no worker slot however long the backoff,
and a cancel (queued -> cancelled) ends the chain there. Its `attempt` counts on from the
attempts before it (1, 2, 3... along the chain). The chain's last execution carries the
outcome: `Engine.call` follows `retried_as` to it, and a cancel of an attempt that already
failed is passed on to it. The history says what happened with the twelve event types as
they are: the failed attempt gets an `execution.diagnostic` (`retry.scheduled`: the next
attempt's id, the delay, attempt n of N) right before its own `execution.failed`; the last
attempt of a chain that ran out gets `retry.exhausted` instead.

**Which failures are retried** (`Retry.retries`, `Retry.retries_code`): a `MajordomusError`
(the handler chose its code) by its code, when it is in `retry_codes`; any other exception
when it is an instance of one of `retry_on`, or when the code it ends with (`internal`) is
in `retry_codes`; a worker lost mid-attempt (the sweeper's `unavailable`) when
`"unavailable"` is in `retry_codes`. A cancel is never retried, nor an attempt a cancel
was asked of.

**The delay** before attempt n + 1 (`Retry.delay_ms(n)`) is exponential with a cap, then
jittered proportionally: `base = min(max_backoff_ms, backoff_ms * factor ** (n - 1))`,
drawn uniformly from `[base * (1 - jitter), base]`. `jitter=1.0` is "full jitter" (anywhere
from 0 to the base: spreads a herd of retries the most, and may retry at once);
`jitter=0.0` none; the default 0.5 keeps at least half the base and spreads the rest.

This module declares; it starts nothing (the next attempt is started through the engine by
`majordomus.attempts`), names no Redis command, and decides nothing about when a worker is
lost (`majordomus.sweeper`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

import msgspec

from majordomus.errors import ErrorCode, MajordomusError
from majordomus.model import ExecutionDiagnostic

if TYPE_CHECKING:
    from majordomus.model import ExecutionSnapshot

MAX_ATTEMPTS = 100
"""The most attempts a policy may declare (the first included)."""

MAX_BACKOFF_MS = 24 * 3600 * 1000
"""The longest delay a policy may declare (a day): a retry waits in the queue, not on a
worker, but a chain should end well within the retention of its failed attempts."""

MAX_FACTOR = 10.0
"""The largest growth per attempt a policy may declare."""

RETRY_SCHEDULED = "retry.scheduled"
"""The diagnostic code of a failed attempt that was retried: the next attempt's id, its
delay, and which attempt of how many it is."""

RETRY_EXHAUSTED = "retry.exhausted"
"""The diagnostic code of a chain's last attempt that failed retryably with no attempt left."""

RETRY_KEY_PREFIX = "retry:"
"""The idempotency key of a retry is this and the id of the attempt it retries: a repeated
creation (an answer lost, a sweeper and a worker racing) answers the one execution."""

RETRYABLE_CODES: frozenset[str] = frozenset(get_args(ErrorCode)) - {"cancelled"}
"""The codes a policy may retry: all of ours but `cancelled` (a cancel ends a chain)."""


@dataclass(frozen=True)
class Retry:
    """A capability's retry policy: `@capability(..., retry=Retry(attempts=3))`.

    Checked when it is written (at declaration, i.e. start-up): nonsense is a `ValueError`.
    """

    attempts: int = 3
    """Attempts in all, the first included (1 to `MAX_ATTEMPTS`; 1 retries nothing)."""
    backoff_ms: int = 1000
    """The delay before the second attempt, before jitter (0 to `MAX_BACKOFF_MS`)."""
    factor: float = 2.0
    """How much each next delay grows (1 to `MAX_FACTOR`; 1 is a constant delay)."""
    max_backoff_ms: int = 300_000
    """The cap of any one delay, before jitter (at least `backoff_ms`, at most a day)."""
    jitter: float = 0.5
    """The fraction of each delay drawn at random (0 none, 1 full jitter; see the module)."""
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Exception types retried (besides `MajordomusError`, which is judged by its code)."""
    retry_codes: tuple[str, ...] = ()
    """Our error codes retried: a `MajordomusError` the handler raised with one of them;
    `internal` for every unexpected exception; `unavailable` for a worker lost mid-attempt."""

    def __post_init__(self) -> None:
        _check_int("attempts", self.attempts, 1, MAX_ATTEMPTS)
        _check_int("backoff_ms", self.backoff_ms, 0, MAX_BACKOFF_MS)
        _check_int("max_backoff_ms", self.max_backoff_ms, 0, MAX_BACKOFF_MS)
        if self.max_backoff_ms < self.backoff_ms:
            raise ValueError(
                f"Retry: max_backoff_ms ({self.max_backoff_ms}) is below backoff_ms "
                f"({self.backoff_ms}); the cap must be at least the first delay"
            )
        _check_number("factor", self.factor, 1.0, MAX_FACTOR)
        _check_number("jitter", self.jitter, 0.0, 1.0)
        object.__setattr__(self, "retry_on", _exception_types(self.retry_on))
        object.__setattr__(self, "retry_codes", _codes(self.retry_codes))

    # -- what is retried --------------------------------------------------------------

    def retries(self, exc: BaseException) -> bool:
        """Whether an attempt that raised `exc` is retried (attempts left or not)."""
        if isinstance(exc, MajordomusError):
            return exc.code in self.retry_codes
        return isinstance(exc, self.retry_on) or "internal" in self.retry_codes

    def retries_code(self, code: str) -> bool:
        """Whether an attempt ended with our error `code` by the system itself (a lost
        worker's `unavailable`) is retried."""
        return code in self.retry_codes

    # -- when -------------------------------------------------------------------------

    def base_delay_ms(self, attempt: int) -> int:
        """The delay after attempt `attempt` (1 for the first) before jitter: exponential
        from `backoff_ms`, capped at `max_backoff_ms`."""
        grown = self.backoff_ms * self.factor ** max(0, attempt - 1)
        return int(min(float(self.max_backoff_ms), grown))

    def delay_ms(self, attempt: int, draw: Callable[[], float] = random.random) -> int:
        """The delay after attempt `attempt` fails before the next one is due: the base
        delay less a random part of up to `jitter` of it (`draw` answers in [0, 1))."""
        base = self.base_delay_ms(attempt)
        return max(0, round(base - base * self.jitter * draw()))

    def view(self) -> RetryView:
        """The policy as `capabilities.describe` shows it."""
        return RetryView(
            attempts=self.attempts,
            backoff_ms=self.backoff_ms,
            factor=self.factor,
            max_backoff_ms=self.max_backoff_ms,
            jitter=self.jitter,
            retry_on=[_type_name(t) for t in self.retry_on],
            retry_codes=list(self.retry_codes),
        )


class RetryView(msgspec.Struct):
    """A retry policy on the wire: its numbers, the exception types by qualified name."""

    attempts: int
    backoff_ms: int
    factor: float
    max_backoff_ms: int
    jitter: float
    retry_on: list[str]
    retry_codes: list[str]


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"Retry: {name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"Retry: {name} must be from {low} to {high}, not {value}")


def _check_number(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"Retry: {name} must be a number, not {value!r}")
    if not low <= value <= high:  # NaN fails this too
        raise ValueError(f"Retry: {name} must be from {low:g} to {high:g}, not {value}")


def _exception_types(types: Any) -> tuple[type[BaseException], ...]:
    items = (types,) if isinstance(types, type) else tuple(_iterable("retry_on", types))
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ValueError(f"Retry: retry_on names exception types, and {item!r} is not one")
        if issubclass(item, MajordomusError):
            raise ValueError(
                f"Retry: retry_on names {item.__name__}, a MajordomusError, which is retried "
                "by its code: name the codes in retry_codes instead"
            )
    return items


def _codes(codes: Any) -> tuple[str, ...]:
    items = (codes,) if isinstance(codes, str) else tuple(_iterable("retry_codes", codes))
    for code in items:
        if code not in RETRYABLE_CODES:
            hint = " (a cancel ends a retry chain)" if code == "cancelled" else ""
            raise ValueError(
                f"Retry: retry_codes names {code!r}, which is not a code a retry can follow"
                f"{hint}; they are {', '.join(sorted(RETRYABLE_CODES))}"
            )
    return tuple(dict.fromkeys(items))


def _iterable(name: str, value: Any) -> Iterable[Any]:
    try:
        return iter(value)
    except TypeError:
        raise ValueError(f"Retry: {name} must be a tuple, not {value!r}") from None


def _type_name(tp: type) -> str:
    module = tp.__module__
    return tp.__qualname__ if module == "builtins" else f"{module}.{tp.__qualname__}"


# -- the chain ------------------------------------------------------------------------------


def exhausted(snap: ExecutionSnapshot, policy: Retry) -> ExecutionDiagnostic:
    """The `retry.exhausted` diagnostic of a chain's last attempt."""
    return ExecutionDiagnostic(
        "info",
        RETRY_EXHAUSTED,
        f"attempt {snap.attempt} of {policy.attempts} failed: no attempt is left",
        f"it retried {snap.retry_of}" if isinstance(snap.retry_of, str) else None,
    )


def attempts_left(snap: ExecutionSnapshot, policy: Retry) -> bool:
    """Whether a failed attempt (its snapshot before the failure) may be retried: attempts
    remain after it. An execution that never started counts as its first attempt."""
    return max(1, snap.attempt) < policy.attempts
