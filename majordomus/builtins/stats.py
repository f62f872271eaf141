"""`executions.stats`: the executions over the last hour or day, as the console's charts
draw them.

Declared like any user's capability, so `GET /api/v1/executions/stats`, the MCP tool
`majordomus_execution_stats` and `majordomus executions stats` are projections of this one
declaration. It is one of the `executions.*` built-ins by name; it has a module of its
own because it reads the store's per-minute roll-up (`majordomus.stats`), not executions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from majordomus.builtins.common import control, engine_of
from majordomus.registry import capability
from majordomus.stats import ExecutionStats, Span, execution_stats

if TYPE_CHECKING:
    from majordomus.context import Context

CONTROL = control("executions")
"""Stable, tagged `executions`, answering directly."""


class StatsInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `executions.stats`."""

    span: Span = "hour"
    """`hour`: the last hour, a point a minute; `day`: the last day, a point a quarter hour."""
    capability: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    """One capability's series alone; absent, every capability together and the busiest
    ones each."""


@capability(
    "executions.stats",
    kind="query",
    input=StatsInput,
    output=ExecutionStats,
    title="Chart the executions",
    description=(
        "Throughput, failures and the 50th and 95th percentiles of the wait (due to started) "
        "and of the duration (started to ended), over the last hour a point a minute or the "
        "last day a point a quarter hour: every capability together, and the 20 busiest "
        "each (or the one named). Read from a per-minute roll-up kept 25 hours by default "
        "(MAJORDOMUS_ROLLUP_KEEP_SECONDS); a percentile is exact to within about 9 %."
    ),
    mcp="majordomus_execution_stats",
    http=("GET", "/api/v1/executions/stats"),
    cli=("executions", "stats"),
    **CONTROL,
)
async def stats(ctx: Context, inp: StatsInput) -> ExecutionStats:
    return await execution_stats(engine_of(ctx), inp.span, inp.capability)
