"""compose.yaml builds its one image once, and the worker's health check tells whether the
worker beats: its exact command, run here against a real worker process on a real Redis,
passes while the worker renews its lease and fails once it stops (frozen with SIGSTOP, so
the process is still there), passes again when it resumes, and fails after it exits.
(No Docker engine runs here: the file is parsed, its health check run on this host.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
import yaml

from tests.api.conftest import api_env
from tests.conftest import ROOT

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
PREFIX = "md-hardening-health"
LEASE_SECONDS = 2.0


def test_one_service_builds_the_image_and_every_other_one_runs_it() -> None:
    builders = [name for name, spec in SERVICES.items() if "build" in spec]
    assert builders == ["api"]
    image = SERVICES["api"]["image"]
    runners = [n for n, spec in SERVICES.items() if spec.get("command", [""])[0] == "majordomus"]
    assert set(runners) == {"api", "worker"}
    for name in runners:
        assert SERVICES[name]["image"] == image, name
    # Built here, never pulled: a registry's image of that name is not this one.
    assert SERVICES["worker"]["pull_policy"] == "never"


def health_command() -> str:
    test = SERVICES["worker"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and len(test) == 2, test
    return str(test[1])


class Worker:
    """`majordomus worker` on keys of its own prefix, with a short lease."""

    def __init__(self, env: dict[str, str]) -> None:
        self.log = tempfile.NamedTemporaryFile(
            prefix="majordomus-health-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "worker"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


@pytest.fixture
def env(suite_redis_url: str) -> Iterator[dict[str, str]]:
    environment = api_env(
        suite_redis_url,
        MAJORDOMUS_KEY_PREFIX=PREFIX,
        MAJORDOMUS_LEASE_SECONDS=str(LEASE_SECONDS),
        MAJORDOMUS_SHUTDOWN_GRACE="1",
    )
    # The image's PATH holds `majordomus` and `python`; here, this interpreter's.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    yield environment
    client = redis_sync.Redis.from_url(suite_redis_url)
    keys = list(client.scan_iter(match=f"{PREFIX}*"))
    if keys:
        client.delete(*keys)
    client.close()


def healthy(env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["sh", "-c", health_command()], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode in (0, 1), done
    return done.returncode == 0


def until_health_is(expected: bool, env: dict[str, str], timeout: float) -> float:
    """Seconds until the health check answers `expected`; fails past `timeout`."""
    began = time.monotonic()
    while healthy(env) != expected:
        assert time.monotonic() - began < timeout, f"health stayed {not expected}"
        time.sleep(0.2)
    return time.monotonic() - began


@pytest.mark.usefixtures("spawns")
def test_the_workers_health_check_passes_only_while_it_beats(env: dict[str, str]) -> None:
    assert not healthy(env)  # no worker at all
    worker = Worker(env)
    try:
        until_health_is(True, env, timeout=30)
        worker.signal(signal.SIGSTOP)  # alive as a process, beating no more
        until_health_is(False, env, timeout=LEASE_SECONDS + 10)
        worker.signal(signal.SIGCONT)
        until_health_is(True, env, timeout=LEASE_SECONDS + 10)
        worker.signal(signal.SIGTERM)
        worker.process.wait(15)
        assert not healthy(env)
    finally:
        worker.stop()
