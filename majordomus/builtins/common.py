"""What the built-in capabilities share: the engine they run on and the input types they reuse."""

from __future__ import annotations

from typing import Annotated

import msgspec

from majordomus.context import Context
from majordomus.engine import Engine
from majordomus.errors import MajordomusError

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
"""A count or cursor in an input: zero or more (the bound, where there is one, clamps)."""


def engine_of(ctx: Context) -> Engine:
    """The engine a built-in runs on; it is never called without one, but say so if it is."""
    if ctx.engine is None:
        raise MajordomusError("unavailable", "this capability needs a running engine")
    return ctx.engine
