"""The "From Python code" tutorial's examples (docs/tutorial/python-client.md), run as an application would run them, and
type-checked as a user's CI would: the asyncio one straight to Redis, the synchronous
(Django-style) one through the API of a `majordomus dev` serving `greetings.py`; and
`mypy --strict` on both, which infers the output type from the declaration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_sync

from tests.conftest import ROOT, running_dev
from tests.docs.examples import marked_block
from tests.test_readme_capability import CONSOLE_SCRIPT, user_env

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture
def app(tmp_path: Path, redis_url: str) -> Path:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    (tmp_path / "greetings.py").write_text(marked_block("greetings.py"))
    for name in ("app_async.py", "app_sync.py"):
        (tmp_path / name).write_text(marked_block(name))
    return tmp_path


def run_app(folder: Path, env: dict[str, str], code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env={**env, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_readme_applications_run_on_either_transport(app: Path, redis_url: str) -> None:
    env = user_env(redis_url)
    with running_dev(env, [str(CONSOLE_SCRIPT)], cwd=app) as dev:
        said = run_app(app, env, f"import asyncio, app_async; asyncio.run(app_async.main({redis_url!r}))")
        lines = said.splitlines()
        assert lines[0] == "Hello, Ada!"
        followed = lines[1 : lines.index("3")]
        assert followed[0] == "1 execution.created" and followed[-1].endswith("execution.completed")
        assert [int(line.split()[0]) for line in followed] == list(range(1, len(followed) + 1))
        assert lines[-2:] == ["queued «redacted»", "cancelled True"]

        said = run_app(app, env, f"import app_sync; app_sync.main({dev.url!r})")
        first, listed = said.splitlines()
        assert "'shouted': 'HELLO!'" in first
        assert first.split("'id': '")[1].split("'")[0] in listed


def test_mypy_strict_infers_the_output_type_from_the_declaration(app: Path) -> None:
    # Beside the tutorial's files, one that claims the wrong output type: mypy must refuse it
    # (it would not, were the declaration's output type lost as Any), and it alone.
    (app / "wrong.py").write_text(
        "from typing import assert_type\n"
        "from greetings import Greet, Greeting, hello\n"
        "from majordomus import Client\n"
        "async def f(c: Client) -> None:\n"
        "    assert_type(await hello.call(c, Greet(name='a', token='b')), str)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--no-incremental", "greetings.py", "app_async.py", "app_sync.py", "wrong.py"],
        cwd=app,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("wrong.py:5:"), done.stdout + done.stderr
    assert '"Greeting"' in errors[0], errors
