"""How one execution is started beyond its capability and input: when, at what priority,
under which idempotency key, and what started it (a schedule, a retry).

A plain value the engine's `start` takes, kept apart from the engine so that declaring the
built-ins (all `majordomus --help` does with them) need not load it.
"""

from __future__ import annotations

from dataclasses import dataclass

from majordomus.priorities import Priority


@dataclass(frozen=True)
class StartOptions:
    """How one execution is started, beyond its capability and input (`Engine.start`)."""

    start_at_ms: int | None = None
    """When it is due (epoch ms); None or a time past: now."""
    priority: Priority | None = None
    """Its level; None: its capability's default."""
    idempotency_key: str | None = None
    """A start with a key already used within the retention answers that execution (the
    same input) or is refused (another input), instead of creating one."""
    schedule: str | None = None
    """The schedule whose tick started it, named in its snapshot."""
    retry_of: str | None = None
    """The execution it retries: the two are linked both ways (`retry_of`, `retried_as`)."""
    attempts_before: int = 0
    """Attempts of its chain before it, so its own `attempt` counts on from them."""
    timeout_ms: int | None = None
    """A bound shorter than its capability's timeout (a longer one is its capability's)."""


NO_OPTIONS = StartOptions()
