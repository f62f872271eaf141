"""What a tool call answers, as MCP results: an output, a failure, or an execution still going.

Shared by direct tool calls (`api.mcp.server`) and tasks (`api.mcp.tasks`, whose completed
result is the one the same call would have answered directly). Nothing here calls anything.
"""

from __future__ import annotations

from typing import Any

import msgspec
from mcp import types

from majordomus.config import LIMITS
from majordomus.errors import MajordomusError
from majordomus.model import ExecutionSnapshot
from majordomus.registry import Registry


def ok_result(value: Any) -> types.CallToolResult:
    """A tool's answer: the structured value, and the same JSON as a text block."""
    return types.CallToolResult(
        content=[types.TextContent(text=msgspec.json.encode(value).decode())],
        structured_content=msgspec.to_builtins(value),
    )


def error_result(err: MajordomusError, **meta: Any) -> types.CallToolResult:
    """A failure as a tool result the model can read and a program can branch on (the
    execution it ran as, when it ran as one, is the error's `correlation_id`)."""
    error = {"code": err.code, "suggestion": err.suggestion}
    if err.correlation_id:
        error["correlation_id"] = err.correlation_id
    return types.CallToolResult(
        content=[types.TextContent(text=f"{err.code}: {err.message}")],
        is_error=True,
        _meta={"majordomus": {"error": error, **meta}},
    )


def still_running(snap: ExecutionSnapshot, registry: Registry) -> types.CallToolResult:
    """A tool call whose execution outlasted the call's wait. Not its output, so not a
    result its output schema would have to describe: an error result that says where the
    execution goes on, with the execution itself in `_meta`."""
    err = MajordomusError(
        "unavailable",
        f"{snap.capability} is still {snap.state} as {snap.id} after "
        f"{LIMITS.wait_bound_ms // 1000} s; its output is not ready yet",
        f"wait for it with the tool {registry.require('executions.wait').exposure.mcp_tool} "
        f"(id {snap.id}), or follow it at {snap.links.live}",
        snap.id,
    )
    return error_result(err, execution=msgspec.to_builtins(snap))
