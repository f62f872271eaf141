"""The `capabilities.*` built-ins: what this server can do, read from its registry.

Declared like any user's capability (control capabilities, as `**CONTROL`); the view they
answer is the registry's record as clients see it (schemas and exposures), never a second
description.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from majordomus.builtins.common import control
from majordomus.registry import REGISTRY, Capability, Registry, capability
from majordomus.retries import RetryView

if TYPE_CHECKING:
    from majordomus.context import Context

CONTROL = control("registry")
"""Stable, tagged `registry`, answering directly."""


class HttpRoute(msgspec.Struct):
    method: str
    path: str


class ExposureView(msgspec.Struct):
    """Where a capability is reachable; `null` says it is not on that surface."""

    mcp_tool: str | None
    http: HttpRoute | None
    cli: str | None


class PerKeyView(msgspec.Struct):
    member: str
    """The input member whose value is the key."""
    limit: int
    """How many of one key's executions may run at once."""


class RateLimitView(msgspec.Struct):
    limit: int
    """Starts per period, spaced evenly."""
    per: str
    """The period: second, minute or hour."""
    key: str | None
    """The input member whose value has a bucket of its own; null: one for all."""
    burst: int
    """How many may start at once after a quiet spell."""


class CollapseView(msgspec.Struct):
    kind: Literal["debounce", "throttle"]
    """`debounce`: one execution once the key is quiet for the window, with the last input;
    `throttle`: at most one per window, with the first input."""
    member: str
    """The input member whose value is the key."""
    seconds: float
    """The window."""


class CapabilityView(msgspec.Struct):
    id: str
    module: str
    kind: str
    title: str
    description: str
    stability: str
    cancellable: bool
    executable: bool
    max_concurrency: int | None
    per_key: PerKeyView | None
    """At most `limit` of its executions run at once per value of the input member
    `member`, fairly between values (`majordomus.flow`); null: no limit per key."""
    rate_limit: RateLimitView | None
    """At most `limit` of its executions start per `per`, globally or per value of the input
    member `key` (`majordomus.flow.RateLimit`); null: no rate limit."""
    collapse: CollapseView | None
    """Its starts of one key within a window collapse into one execution, whose `collapsed`
    counts them (`majordomus.flow`); null: every start is an execution of its own."""
    retry: RetryView | None
    """Its retry policy (`majordomus.retries`); null: a failed execution is not retried."""
    tags: list[str]
    searchable: list[str]
    """The input members its executions may be found by: `executions.list`'s `search`
    (`member=value`) with this capability."""
    exposure: ExposureView
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]


class CapabilityList(msgspec.Struct):
    count: int
    capabilities: list[CapabilityView]


def registry_of(ctx: Context) -> Registry:
    """The registry of the engine the call runs on; without one, the process's."""
    return ctx.engine.registry if ctx.engine else REGISTRY


def view_of(cap: Capability) -> CapabilityView:
    e = cap.exposure
    return CapabilityView(
        id=cap.id,
        module=cap.module,
        kind=cap.kind,
        title=cap.title,
        description=cap.description,
        stability=cap.stability,
        cancellable=cap.cancellable,
        executable=cap.executable,
        max_concurrency=cap.max_concurrency,
        per_key=PerKeyView(cap.per_key.member, cap.per_key.limit) if cap.per_key else None,
        rate_limit=RateLimitView(**cap.rate_limit.view()) if cap.rate_limit else None,
        collapse=CollapseView(**cap.collapse.view()) if cap.collapse else None,
        retry=cap.retry.view() if cap.retry is not None else None,
        tags=list(cap.tags),
        searchable=list(cap.searchable),
        exposure=ExposureView(
            e.mcp_tool,
            HttpRoute(e.http_method, e.http_path) if e.http_method and e.http_path else None,
            "majordomus " + " ".join(e.cli_path) if e.cli_path else None,
        ),
        input_schema=cap.input_schema,
        output_schema=cap.output_schema,
    )


class CapabilitiesInput(msgspec.Struct, forbid_unknown_fields=True):
    """`capabilities.list` takes an optional module filter."""

    module: str | None = None


@capability(
    "capabilities.list",
    kind="query",
    input=CapabilitiesInput,
    output=CapabilityList,
    title="List capabilities",
    description="Every capability this server knows, with its schemas and exposures.",
    mcp="majordomus_capabilities",
    http=("GET", "/api/v1/capabilities"),
    cli=("capabilities", "list"),
    **CONTROL,
)
async def list_capabilities(ctx: Context, inp: CapabilitiesInput) -> CapabilityList:
    views = [view_of(c) for c in registry_of(ctx) if inp.module in (None, c.module)]
    return CapabilityList(len(views), views)


class DescribeInput(msgspec.Struct, forbid_unknown_fields=True):
    """The capability to describe."""

    id: str


@capability(
    "capabilities.describe",
    kind="query",
    input=DescribeInput,
    output=CapabilityView,
    title="Describe a capability",
    description="One capability: its description, schemas and where it is exposed.",
    mcp="majordomus_capability",
    http=("GET", "/api/v1/capability"),
    cli=("capabilities", "describe"),
    **CONTROL,
)
async def describe_capability(ctx: Context, inp: DescribeInput) -> CapabilityView:
    return view_of(registry_of(ctx).require(inp.id))
