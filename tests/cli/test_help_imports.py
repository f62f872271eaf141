"""`majordomus --help` loads what drawing the command list needs, and nothing a command
only needs when it runs: not the engine, the handler context, the Redis client, httpx,
nor the API's or the worker's side; and the commands under a group are made (their input
schemas read) when the group is first used, with the same help either way."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

RUN_ONLY = (
    "majordomus.engine",
    "majordomus.context",
    "majordomus.store.executions",
    "redis",
    "httpx",
    "arq",
    "litestar",
    "uvicorn",
    "mcp",
    "jsonschema",
)
"""Modules a command loads when it runs, never to show the help."""

PROBE = """
import sys
from majordomus.cli.app import main
sys.argv = ["majordomus", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(" ".join(m for m in {modules!r} if m in sys.modules), file=sys.stderr)
"""


def loaded_by(*argv: str) -> tuple[set[str], str]:
    """The run-only modules loaded by `majordomus ARGV`, and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=list(RUN_ONLY)), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return set(last.split()), done.stdout


def test_the_help_loads_nothing_a_command_only_needs_to_run() -> None:
    loaded, shown = loaded_by("--help")
    assert "executions" in shown and "run" in shown
    assert loaded == set(), f"majordomus --help loaded {sorted(loaded)}"


def test_a_group_is_made_when_used_and_its_help_names_its_commands() -> None:
    loaded, shown = loaded_by("executions", "--help")
    for name in ("list", "show", "events", "cancel", "wait"):
        assert name in shown, shown
    assert loaded == set(), f"majordomus executions --help loaded {sorted(loaded)}"
