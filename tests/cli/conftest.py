"""Fixtures for driving the CLI as a user would: in-process (typer's runner), as a real
subprocess in a pseudo-terminal, beside real worker processes and a real API server, all on
the suite's Redis (`MAJORDOMUS_TEST_REDIS_URL`, flushed before each test)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync
from typer.testing import CliRunner

from majordomus.cli import app
from majordomus.cli.tree import register
from majordomus.config import settings
from majordomus.local.embedded import free_port
from tests.cli.terminal import Terminal
from tests.conftest import ROOT

LEASE_SECONDS = "3"


def child_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of every process a test starts: the suite's Redis, its capabilities."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MAJORDOMUS_")
        and k
        not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")
    }
    env.update(
        {
            "MAJORDOMUS_REDIS_URL": redis_url,
            "MAJORDOMUS_CAPABILITIES": "tests.capabilities",
            "MAJORDOMUS_LEASE_SECONDS": LEASE_SECONDS,
            "MAJORDOMUS_SHUTDOWN_GRACE": "1",
            "MAJORDOMUS_CANCEL_GRACE": "1",
            "PYTHONPATH": str(ROOT),
            "TERM": "xterm-256color",
        }
    )
    env.update(extra)
    return env


@pytest.fixture
def flushed(redis_url: str) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis.from_url(redis_url)
    try:
        client.ping()
    except Exception as exc:  # CI must fail, not skip, when its Redis is missing.
        pytest.fail(f"Redis at {redis_url} is unreachable: {exc}")
    client.flushdb()
    yield client
    client.close()


class Cli:
    """`majordomus ...` in this process, through typer's runner, on the suite's Redis."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.runner = CliRunner()
        register(app)

    def __call__(self, *args: str, input: str | None = None) -> Any:
        return self.runner.invoke(
            app, list(args), env=self.env, input=input, catch_exceptions=False
        )

    def json(self, *args: str) -> Any:
        result = self(*args, "--format", "json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


@pytest.fixture
def cli(flushed: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    env = child_env(redis_url, COLUMNS="200")
    for name in list(os.environ):
        if name.startswith("MAJORDOMUS_") and name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("MAJORDOMUS_") or name == "COLUMNS":
            monkeypatch.setenv(name, value)
    settings.cache_clear()
    yield Cli(env)
    settings.cache_clear()


def majordomus_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "majordomus.cli", *args]


@pytest.fixture
def terminal(spawns: None, flushed: Any, redis_url: str) -> Iterator[Any]:
    """Start `majordomus ARGS` in a pseudo-terminal: `terminal("run", "executions.demonstrate")`."""
    opened: list[Terminal] = []

    def start(*args: str, **env: str) -> Terminal:
        t = Terminal(majordomus_argv(*args), child_env(redis_url, **env), str(ROOT))
        opened.append(t)
        return t

    yield start
    for t in opened:
        t.close()


class Workers:
    """`majordomus worker` processes, their logs in files (a pipe nobody reads would fill)."""

    def __init__(self, redis_url: str, logs: Path) -> None:
        self.redis_url = redis_url
        self.logs = logs
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1, **env: str) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(count):
            log = open(self.logs / f"worker-{len(self.processes)}.log", "wb")  # noqa: SIM115
            process = subprocess.Popen(
                majordomus_argv("worker"),
                cwd=ROOT,
                env=child_env(self.redis_url, **env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            self.processes.append(process)
            started.append(process)
        self.wait_present(len(self.processes))
        return started

    def wait_present(self, count: int, timeout: float = 30) -> None:
        client = redis_sync.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + timeout
        try:
            while client.zcard("md:workers") < count:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{count} workers did not report within {timeout}s")
                time.sleep(0.05)
        finally:
            client.close()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(Exception):
                process.wait(10)


@pytest.fixture
def workers(spawns: None, flushed: Any, redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(redis_url, tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture(scope="module")
def api_server(
    spawns: None, redis_url_for_module: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`majordomus serve` on a free port; its base URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("api") / "serve.log"
    log = open(log_path, "wb")  # noqa: SIM115
    process = subprocess.Popen(
        majordomus_argv("serve", "--port", str(port)),
        cwd=ROOT,
        env=child_env(redis_url_for_module),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/api/v1/live", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"majordomus serve did not come up:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.1)
    yield base
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def redis_url_for_module() -> str:
    from tests.conftest import _redis_url

    return _redis_url()
