"""What a tool call answers, as MCP results: an output, a failure, or an execution still going.

Shared by direct tool calls (`api.mcp.server`) and tasks (`api.mcp.tasks`, whose completed
result is the one the same call would have answered directly). Nothing here calls anything.
"""

from __future__ import annotations

from typing import Any

import msgspec
from mcp import types

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


def still_running(
    snap: ExecutionSnapshot, registry: Registry, waited_s: float | None = None
) -> types.CallToolResult:
    """A tool call whose execution outlasted the call's wait (`waited_s`, the setting
    `mcp_call_seconds`): the execution goes on, and the answer says so before a client's
    own request timeout would cut the call and lose the execution's id.

    Not its output, so not a result its output schema would have to describe (a result
    without `isError` must conform to it, and the official client checks that it does): an
    error result, `unavailable`, whose first text says the execution is still going and
    names it, whose second tells the model how to follow it rather than call again (which
    would start another), with the execution itself in `_meta.majordomus.execution`."""
    waited = f" after {waited_s:g} s" if waited_s is not None else ""
    wait_tool = registry.require("executions.wait").exposure.mcp_tool
    err = MajordomusError(
        "unavailable",
        f"{snap.capability} is still {snap.state} as {snap.id}{waited}; it goes on, and its "
        "output is not ready yet",
        f"wait for it with the tool {wait_tool} (id {snap.id}), or follow it at {snap.links.live}",
        snap.id,
    )
    result = error_result(err, execution=msgspec.to_builtins(snap))
    result.content.append(
        types.TextContent(
            text=(
                f"The execution {snap.id} has not failed: it is still {snap.state}. Do not "
                f"call the tool again for it (that starts another execution): wait for it "
                f"with the tool {wait_tool} (id {snap.id}), read the resource "
                f"majordomus://executions/{snap.id}, or follow it at {snap.links.live}."
            )
        )
    )
    return result
