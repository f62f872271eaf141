"""Execution states and the one table of moves between them.

`TRANSITIONS` is the whole contract; `may_move_to` reads it for Python callers and the
store's Lua script receives the same table when it is loaded, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Literal, get_args

ExecutionState = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]

STATES: tuple[str, ...] = get_args(ExecutionState)
ACTIVE: frozenset[str] = frozenset({"queued", "running", "cancelling"})
FINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"succeeded", "failed", "cancelling"}),
    "cancelling": frozenset({"cancelled", "succeeded", "failed"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

# The state an event moves its execution to; events absent here move nothing.
STATE_OF_EVENT: dict[str, str] = {
    "execution.started": "running",
    "execution.cancelling": "cancelling",
    "execution.cancelled": "cancelled",
    "execution.completed": "succeeded",
    "execution.failed": "failed",
}


def may_move_to(current: str, target: str) -> bool:
    """Whether an execution in `current` may move to `target`."""
    return target in TRANSITIONS.get(current, frozenset())


def is_final(state: str) -> bool:
    return state in FINAL
