"""The process commands refuse a bad or unreachable Redis with a sentence, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from majordomus.errors import EXIT_CODE
from majordomus.store.embedded import free_port
from tests.cli.conftest import child_env
from tests.conftest import ROOT


def _run(command: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "majordomus.cli", command],
        cwd=ROOT,
        env=child_env(url),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_an_unreachable_redis_stops_the_process_with_a_sentence(command: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = _run(command, url)
    assert done.returncode == EXIT_CODE["unavailable"]
    assert f"Redis at {url} is unreachable" in done.stderr
    assert "MAJORDOMUS_REDIS_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_redis_url_that_is_no_url_is_named(command: str) -> None:
    done = _run(command, "http://127.0.0.1:6379/0")
    assert done.returncode == EXIT_CODE["invalid_input"]
    assert "'http://127.0.0.1:6379/0' is not a Redis URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
