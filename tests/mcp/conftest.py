"""Fixtures for the MCP tests: real API processes (`majordomus serve`) and client processes.

Every API process runs on the suite's Redis with `MAJORDOMUS_CAPABILITIES=tests.capabilities`
and a 3 s lease (so a silent holder's episode detaches within seconds); a test may start
its own with other settings, and kill or stop any of them. Their output goes to a file
(never a pipe nobody reads), shown when a process does not come up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from majordomus.local.embedded import free_port
from tests.conftest import ROOT, WorkerProcess, _redis_url, wait_for_workers
from tests.mcp.inspector_setup import inspector  # noqa: F401  (the Inspector tests' fixture)

BASE_ENV = {
    "MAJORDOMUS_CAPABILITIES": "tests.capabilities",
    "MAJORDOMUS_LEASE_SECONDS": "3",
    "MAJORDOMUS_SHUTDOWN_GRACE": "1",
    "MAJORDOMUS_CANCEL_GRACE": "1",
}


def process_env(redis_url: str, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    environ.update(BASE_ENV)
    environ.update({"MAJORDOMUS_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)})
    environ.update(env)
    return environ


class ApiProcess:
    """`majordomus serve` on a free loopback port."""

    def __init__(self, redis_url: str, wait: bool = True, **env: str) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="majordomus-api-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "serve", "--port", str(self.port)],
            cwd=ROOT,
            env=process_env(redis_url, **env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_ready()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/api/v1/live", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"the API process did not come up:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"the API did not stop within {timeout:g} s of signal {sig}:\n{self.output()}"
            ) from None

    def output(self) -> str:
        with open(self.log.name, errors="replace") as f:
            return f.read()


@pytest.fixture(scope="package")
def shared_api(spawns: None) -> Iterator[ApiProcess]:
    """One API process for the tests that need nothing special of it, gone after them: an
    API is a sweeper candidate, and must not sweep the later packages' test executions."""
    api = ApiProcess(_redis_url())
    yield api
    api.stop()
    api.log.close()


@pytest.fixture
def api(shared_api: ApiProcess, redis: Any) -> ApiProcess:
    """The shared API process, on a freshly flushed database."""
    return shared_api


@pytest.fixture
async def worker(redis: Any, worker_process: Any) -> WorkerProcess:
    """A worker process of the test's own, reporting before the test starts.

    A process, not a shared one: each test flushes the database, and with it the leases a
    long-lived worker holds, so its executions would be swept as lost.
    """
    started: WorkerProcess = worker_process()
    await wait_for_workers(redis, 1)
    return started


class Spawner:
    """`spawn_api(MAJORDOMUS_X="...")`: an API process of the test's own, once it answers;
    `spawn_api.many(2, ...)`: several, started at once and then waited for (each takes a
    second or two to import, side by side rather than one after the other)."""

    def __init__(self) -> None:
        self.started: list[ApiProcess] = []

    def __call__(self, **env: str) -> ApiProcess:
        return self.many(1, **env)[0]

    def many(self, count: int, **env: str) -> list[ApiProcess]:
        apis = [ApiProcess(_redis_url(), wait=False, **env) for _ in range(count)]
        self.started.extend(apis)
        for api in apis:
            api.wait_ready()
        return apis


@pytest.fixture
def spawn_api(spawns: None, redis: Any) -> Iterator[Spawner]:
    """Start API processes of a test's own (see `Spawner`)."""
    spawner = Spawner()
    yield spawner
    for api in spawner.started:
        with contextlib.suppress(Exception):
            api.stop(signal.SIGKILL)
        api.log.close()


class ClientProcess:
    """`python -m tests.mcp.client_process`: a separate MCP client, to be killed or awaited."""

    def __init__(self, url: str, external_id: str, mode: str, then: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp.client_process", url, external_id, mode, then],
            cwd=ROOT,
            env=process_env(_redis_url()),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def answer(self, timeout: float = 30) -> str:
        """The first line it printed: the attach answer as JSON."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout)
            assert self.process.stderr is not None
            raise AssertionError(f"the client printed nothing:\n{self.process.stderr.read()}")
        return line

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture
def client_process(spawns: None) -> Iterator[Any]:
    started: list[ClientProcess] = []

    def spawn(url: str, external_id: str, mode: str = "auto", then: str = "exit") -> ClientProcess:
        client = ClientProcess(url, external_id, mode, then)
        started.append(client)
        return client

    yield spawn
    for client in started:
        client.kill()


# -- calling tools --------------------------------------------------------------------------

MODES = ["auto", "legacy"]
"""`mcp.Client` modes: `auto` speaks 2026-07-28 (no session), `legacy` the 2025 handshake."""

PROTOCOL_OF = {"auto": "2026-07-28", "legacy": "2025-11-25"}

FINAL = {"succeeded", "failed", "cancelled"}


async def call(client: Any, tool: str, args: dict[str, Any] | None = None, **kw: Any) -> Any:
    """A tool's structured answer, checked to be the same JSON as its text block."""
    result = await client.call_tool(tool, args or {}, **kw)
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def failure(client: Any, tool: str, args: dict[str, Any], **kw: Any) -> tuple[str, str]:
    """A tool's error result: (the code under `_meta`, the text)."""
    result = await client.call_tool(tool, args, **kw)
    assert result.is_error, result
    assert result.structured_content is None
    code = result.meta["majordomus"]["error"]["code"]
    text = result.content[0].text
    assert text.startswith(f"{code}: ")
    return code, text


async def until_state(client: Any, execution_id: str, states: set[str], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        snap = await call(client, "majordomus_execution", {"id": execution_id})
        if snap["state"] in states:
            return snap
        assert time.monotonic() < deadline, f"{execution_id} stayed {snap['state']}"
        await anyio.sleep(0.05)
