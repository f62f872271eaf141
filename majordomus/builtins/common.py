"""What the built-in capabilities share: the engine they run on, the input types they reuse,
and what their control capabilities declare alike.

Nothing here declares a capability; each stays one `@capability(...)` in its module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypedDict, cast

import msgspec

from majordomus.errors import MajordomusError
from majordomus.model import CURSOR_BOUND
from majordomus.registry import Stability

if TYPE_CHECKING:
    # Only named in annotations: declaring the built-ins (all `majordomus --help` does with
    # them) loads neither the handler context nor the engine, nor Redis behind them.
    from majordomus.context import Context
    from majordomus.engine import Engine

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
"""A count in an input: zero or more (the bound, where there is one, clamps)."""

Cursor = Annotated[int, msgspec.Meta(ge=0, extra_json_schema={"maximum": CURSOR_BOUND})]
"""A sequence number in an input: a cursor past `CURSOR_BOUND` names no event and is
refused rather than clamped, and the schema says so (as `maximum`: msgspec bounds no
integer past int64, and the schema is what inputs are validated with first)."""


class ControlDeclaration(TypedDict):
    """The members a module's control capabilities declare alike, spread into each of their
    `@capability(...)` as `**CONTROL`."""

    stability: Stability
    tags: tuple[str, ...]
    executable: bool


def control(tag: str, stability: Stability = "stable") -> ControlDeclaration:
    """A module's control capabilities: tagged `tag`, of one stability, and answering
    directly (`executable=False`: `executions.start` never runs them as executions)."""
    return ControlDeclaration(stability=stability, tags=(tag,), executable=False)


def engine_of(ctx: Context) -> Engine:
    """The engine a built-in runs on; it is never called without one, but say so if it is.
    (A context knows its engine by the little it uses itself: every context is made by an
    `Engine`, which is above the context's module.)"""
    if ctx.engine is None:
        raise MajordomusError("unavailable", "this capability needs a running engine")
    return cast("Engine", ctx.engine)
