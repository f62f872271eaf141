"""`majordomus --help` and a group's or a command's help import neither the API's side nor
the worker's, nor what only running a command needs, and they reach no Redis.

The command tree is made whole from the registry when the app starts (every capability's
command a projection of its declaration), with plain lazy imports: the process commands
import their side inside themselves, a capability command imports the engine and its
transports where it runs. A regression guard read from `python -X importtime` (every module
a process imported), never from a clock: the time of `--help` is measured in `bench/`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

NOT_FOR_THE_HELP = (
    # the API's and the worker's side: only `serve`, `dev`, `mcp` and `worker` import them
    "majordomus.api",
    "majordomus.workers",
    "litestar",
    "uvicorn",
    "mcp",
    "arq",
    # what only running a capability command imports
    "majordomus.engine",
    "majordomus.context",
    "majordomus.store",
    "redis",
    "majordomus.cli.render",
    "httpx",
    "httpx_sse",
    "jsonschema",
    "rich.live",
    "rich.progress",
)
"""Modules (and their submodules) that showing any help imports none of."""

HELPS = (
    ("--help",),
    ("executions", "--help"),
    ("executions", "list", "--help"),
    ("run", "--help"),
    ("run", "executions.demonstrate", "--help"),
    ("queue", "--help"),
    ("follow", "--help"),
    ("worker", "--help"),
    ("serve", "--help"),
)


def environment(**extra: str) -> dict[str, str]:
    """This environment without MAJORDOMUS_* (the built-in capabilities only), on ROOT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def imported(argv: tuple[str, ...], env: dict[str, str]) -> tuple[list[str], int, str]:
    """Every module `python -X importtime -m majordomus.cli ARGV` imported (in order), its
    exit code, and what it printed (stdout, then the rest of stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "majordomus.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    modules, said = [], []
    for line in done.stderr.splitlines(keepends=True):
        if not line.startswith("import time:"):
            said.append(line)
        elif not line.rstrip().endswith("| imported package"):
            modules.append(line.rsplit("|", 1)[1].strip())
    assert modules, done.stderr[-2000:]
    return modules, done.returncode, done.stdout + "".join(said)


def under(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
@pytest.mark.usefixtures("spawns")
def test_a_help_imports_neither_a_side_nor_what_running_needs(argv: tuple[str, ...]) -> None:
    modules, code, shown = imported(argv, environment())
    assert code == 0 and "Usage" in shown, shown
    assert "majordomus.registry" in modules  # the tree is the registry's
    assert under(modules, NOT_FOR_THE_HELP) == []


@pytest.mark.usefixtures("spawns")
def test_the_help_names_every_command_and_group_the_registry_projects() -> None:
    _, code, shown = imported(("--help",), environment())
    assert code == 0, shown
    for name in ("run", "follow", "executions", "capabilities", "queue", "workers", "worker"):
        assert f" {name} " in shown, (name, shown)
    _, _, shown = imported(("run", "--help"), environment())
    assert "executions.demonstrate" in shown, shown


@pytest.mark.usefixtures("spawns")
def test_the_help_with_a_redis_named_neither_reaches_it_nor_imports_more() -> None:
    # The settings are read (a bad one stops every command); nothing connects to port 1.
    env = environment(MAJORDOMUS_REDIS_URL="redis://127.0.0.1:1/0", MAJORDOMUS_KEY_PREFIX="kp")
    modules, code, shown = imported(("--help",), env)
    assert code == 0 and "Commands" in shown, shown
    assert under(modules, NOT_FOR_THE_HELP) == []


@pytest.mark.usefixtures("spawns")
def test_a_bad_setting_stops_the_help_as_it_stops_every_command() -> None:
    _, code, said = imported(("--help",), environment(MAJORDOMUS_MAX_JOBS="many"))
    assert code != 0 and "bad configuration" in said, said
