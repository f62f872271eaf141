"""The next attempt of a retry chain, started through the engine (`start_next_attempt`):
what a retry policy (`majordomus.retries`) decides, done. The worker that saw an attempt
fail and the sweeper that found its worker gone both call it; an idempotency key makes
the chain never fork, whoever calls it how many times.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from majordomus.clock import now_stamp, stamp_of
from majordomus.engine import Engine
from majordomus.model import ExecutionDiagnostic, ExecutionSnapshot
from majordomus.registry import Capability
from majordomus.retries import RETRY_KEY_PREFIX, RETRY_SCHEDULED
from majordomus.start_options import StartOptions


@dataclass(frozen=True)
class NextAttempt:
    """The attempt that retries a failed one: started, and due after `delay_ms`."""

    execution_id: str
    number: int
    """Its attempt number along the chain (2 for the first retry)."""
    attempts: int
    """Attempts in all, as the policy declares."""
    delay_ms: int | None
    """Its backoff; None when it was found already started (by the process before)."""
    due_at: str | None

    def diagnostic(self) -> ExecutionDiagnostic:
        """The `retry.scheduled` diagnostic the failed attempt carries."""
        when = f" in {self.delay_ms} ms" if self.delay_ms is not None else ""
        return ExecutionDiagnostic(
            "info",
            RETRY_SCHEDULED,
            f"retried as {self.execution_id}: attempt {self.number} of {self.attempts}{when}",
            f"due at {self.due_at}" if self.due_at else None,
            f"follow it: executions.wait id={self.execution_id}; a cancel of it ends the chain",
        )


async def start_next_attempt(
    engine: Engine,
    cap: Capability,
    snap: ExecutionSnapshot,
    worker_input: bytes | None,
    *,
    floor_ms: int = 0,
    timeout_ms: int | None = None,
) -> NextAttempt:
    """Start the attempt after `snap` (a failed attempt of `cap`, not yet ended: its
    terminal event follows this), due after the policy's delay (at least `floor_ms`).

    Its input is the failed attempt's unredacted one (`worker_input`, as the worker or the
    sweeper read it), its actor, episode and priority the same. The store writes the
    links both ways in the step that creates it, and its idempotency key
    (`retry:<failed id>`) makes any repeat of this call, by this process or another,
    answer that one execution: a chain never forks. One found already linked
    (`retried_as`) is answered as it is. `timeout_ms` is the start's own bound on its
    running time, when it gave one (the worker knows it): every attempt keeps it.
    """
    policy = cap.retry
    assert policy is not None, f"{cap.id} declares no retry policy"
    number = max(1, snap.attempt) + 1
    if isinstance(snap.retried_as, str):
        return NextAttempt(snap.retried_as, number, policy.attempts, None, None)
    delay = max(floor_ms, policy.delay_ms(number - 1))
    due_ms = now_stamp()[1] + delay
    plain = msgspec.json.decode(worker_input) if worker_input else None
    started = await engine.start(
        cap.id,
        plain,
        actor=snap.actor,
        episode=snap.episode if isinstance(snap.episode, str) else None,
        options=StartOptions(
            start_at_ms=due_ms,
            priority=snap.priority,
            idempotency_key=RETRY_KEY_PREFIX + snap.id,
            retry_of=snap.id,
            attempts_before=number - 1,
            timeout_ms=timeout_ms,
        ),
    )
    due_at = started.due_at if isinstance(started.due_at, str) else stamp_of(due_ms)
    return NextAttempt(started.id, number, policy.attempts, delay, due_at)
