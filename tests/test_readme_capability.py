"""The "Write a capability" tutorial (docs/tutorial/capability.md; the README shows the same
module), run as a newcomer would run it: its module written as `greetings.py` into an empty
folder, `majordomus dev` (the console
script, which puts no folder on `sys.path`) started from that folder with
`MAJORDOMUS_CAPABILITIES=greetings` and no `PYTHONPATH`, an execution started over HTTP,
and the page's CLI command line run beside it."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_sync

from tests.conftest import running_dev
from tests.docs.examples import marked_block

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONSOLE_SCRIPT = Path(sys.executable).with_name("majordomus")


def user_env(redis_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MAJORDOMUS_") and k not in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR")
    }
    env.update({"MAJORDOMUS_REDIS_URL": redis_url, "MAJORDOMUS_CAPABILITIES": "greetings"})
    return env


@pytest.fixture
def folder(tmp_path: Path, redis_url: str) -> Path:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    (tmp_path / "greetings.py").write_text(marked_block("greetings.py"))
    return tmp_path


@contextlib.contextmanager
def dev(folder: Path, env: dict[str, str]) -> Iterator[str]:
    """`majordomus dev`, the console script, from the folder of the tutorial's module."""
    with running_dev(env, [str(CONSOLE_SCRIPT)], cwd=folder) as running:
        yield running.url


def test_the_readme_capability_runs_from_its_folder_as_the_readme_says(
    folder: Path, redis_url: str
) -> None:
    env = user_env(redis_url)
    with dev(folder, env) as base, httpx.Client(base_url=base, timeout=30) as http:
        started = http.post(
            "/api/v1/executions/start",
            json={
                "capability": "greetings.hello",
                "input": {"name": "Ada", "token": "s3cret-token", "delay_ms": 50},
            },
        )
        assert started.status_code == 200, started.text
        execution = started.json()["id"]
        final = http.get(
            "/api/v1/executions/wait", params={"id": execution, "timeout_ms": 30_000}
        ).json()
        assert final["state"] == "succeeded", final
        assert final["output"] == {"message": "Hello, Ada!", "times": 3}
        assert final["cancellable"] is True

        events = http.get("/api/v1/executions/events", params={"id": execution}).json()["events"]
        logs = [e["data"]["message"] for e in events if e["type"] == "execution.log"]
        assert logs == ["signing in with «redacted»"] + ["Hello, Ada!"] * 3
        assert "s3cret-token" not in str(events)

        direct = http.post("/api/v1/greetings/shout", json={"text": "hi"})
        assert direct.json() == {"text": "HI!"}, direct.text
        ran_as = http.get(
            "/api/v1/executions/get", params={"id": direct.headers["Majordomus-Execution"]}
        ).json()
        assert ran_as["state"] == "succeeded" and ran_as["worker"], ran_as  # on dev's worker
        listed = http.get("/api/v1/capabilities", params={"module": "greetings"})
        caps = {c["id"]: c for c in listed.json()["capabilities"]}
        assert caps["greetings.shout"]["max_concurrency"] == 1, caps
        assert caps["greetings.hello"]["exposure"]["mcp_tool"] == "majordomus_greetings_hello"
        assert caps["greetings.shout"]["exposure"]["mcp_tool"] == "majordomus_greetings_shout"

        line = marked_block("cli-hello").strip()
        words = shlex.split(line)
        assigned = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
        argv = [w for w in words if w not in {f"{k}={v}" for k, v in assigned.items()}]
        assert argv[0] == "majordomus", line
        ran = subprocess.run(
            [str(CONSOLE_SCRIPT), *argv[1:]],
            cwd=folder,
            env={**env, **assigned},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "signing in with «redacted»" in ran.stdout
        assert ran.stdout.count("Hello, Ada!") >= 3
        assert "succeeded" in ran.stdout


def test_a_module_that_is_not_in_the_folder_names_the_variable_and_the_folder(
    tmp_path: Path, redis_url: str
) -> None:
    env = user_env(redis_url)
    ran = subprocess.run(
        [str(CONSOLE_SCRIPT), "capabilities", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1
    said = ran.stderr.strip()
    assert "Traceback" not in said, said
    assert "'greetings'" in said and "MAJORDOMUS_CAPABILITIES" in said
    assert str(tmp_path) in said
