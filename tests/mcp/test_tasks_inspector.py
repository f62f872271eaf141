"""The MCP Inspector's CLI calls a tool that may be a task (it declares no tasks extension, so
the call is answered as any call is) and sees every tool's `execution.taskSupport`.

The Inspector is the one `tests/mcp/inspector_setup.py` installs and keeps (skipped where it
cannot be, except under CI)."""

from __future__ import annotations

import json
from typing import Any

from tests.mcp.conftest import ApiProcess
from tests.mcp.inspector_setup import Inspector, called
from tests.mcp.test_tasks import DEMO


def test_the_inspector_calls_a_task_capable_tool_and_sees_its_task_support(
    inspector: Inspector, api: ApiProcess, worker: Any
) -> None:
    done = called(
        inspector(api.url, "--method", "tools/call", "--tool-name", DEMO, "--tool-arg", "steps=2")
    )
    assert done["steps"] == 2 and done["observed"] is True
    listed = inspector(api.url, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert tools[DEMO]["execution"]["taskSupport"] == "optional"
    assert tools["majordomus_execution_wait"]["execution"]["taskSupport"] == "forbidden"
