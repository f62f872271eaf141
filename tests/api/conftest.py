"""Fixtures for the API: real server processes (`majordomus serve`) on free loopback ports,
a real worker process, all on the suite's Redis, driven over real sockets with httpx.

The main API and worker live for the whole `tests/api` package (started once, stopped when
the package is done, so they never touch other packages' tests); tests that need a server
configured otherwise (a token, a small `MAJORDOMUS_MAX_LIVE`, a Redis of their own) start
their own `ApiProcess`.
"""

from __future__ import annotations

import asyncio
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

import httpx
import pytest
import redis as redis_sync
from httpx_sse import EventSource

from majordomus.local.embedded import free_port
from tests.conftest import ROOT, _redis_url

HEARTBEAT_SECONDS = "1"
TOKEN = "s3cret"
TERMINAL = {"execution.completed", "execution.failed", "execution.cancelled"}


def api_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env.update(
        {
            "MAJORDOMUS_REDIS_URL": redis_url,
            "MAJORDOMUS_CAPABILITIES": "tests.capabilities",
            "MAJORDOMUS_LEASE_SECONDS": "3",
            "MAJORDOMUS_HEARTBEAT_SECONDS": HEARTBEAT_SECONDS,
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


class ApiProcess:
    """`python -m majordomus.cli serve --port N` as a child process, restartable."""

    def __init__(self, redis_url: str, port: int | None = None, **env: str) -> None:
        self.redis_url = redis_url
        self.port = port or free_port()
        self.env = api_env(redis_url, **env)
        self.log = tempfile.NamedTemporaryFile(
            prefix="majordomus-api-", suffix=".log", delete=False
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30) -> ApiProcess:
        return self.launch().wait_ready(timeout)

    def launch(self) -> ApiProcess:
        """Start the process without waiting for it to answer (`wait_ready` does): what else
        a test starts meanwhile comes up beside it, not after it."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "serve", "--port", str(self.port)],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, timeout: float = 30) -> ApiProcess:
        """Until the launched process answers `/api/v1/live`."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the API exited at start:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/api/v1/live", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise AssertionError(f"the API did not answer within {timeout}s:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        code = self.process.returncode
        self.process = None
        return code

    def restart(self, sig: int = signal.SIGTERM) -> ApiProcess:
        self.stop(sig)
        return self.start()

    def output(self) -> str:
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 20)
        # Idle connections dropped before uvicorn drops them (its keep-alive is 5 s): a
        # request sent on one as the server closes it fails with "Server disconnected".
        kwargs.setdefault("limits", httpx.Limits(keepalive_expiry=2.0))
        return httpx.Client(base_url=self.url, **kwargs)

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


def flush(redis_url: str) -> None:
    client = redis_sync.Redis.from_url(redis_url)
    try:
        client.ping()
    except redis_sync.RedisError as exc:  # CI must fail, not skip, when its Redis is missing.
        pytest.fail(f"Redis at {redis_url} is unreachable: {exc}")
    client.flushdb()
    client.close()


@pytest.fixture(scope="package")
def suite_redis_url() -> str:
    return _redis_url()


@pytest.fixture(scope="package")
def api(spawns: None, suite_redis_url: str) -> Iterator[ApiProcess]:
    """The package's API process (with the test capabilities, 1 s heartbeats)."""
    flush(suite_redis_url)
    server = ApiProcess(suite_redis_url).start()
    yield server
    server.close()


@pytest.fixture(scope="package")
def locked_api(spawns: None, suite_redis_url: str) -> Iterator[ApiProcess]:
    """An API with a bearer token, room for two live channels, and the built-ins only."""
    server = ApiProcess(
        suite_redis_url,
        MAJORDOMUS_API_TOKEN=TOKEN,
        MAJORDOMUS_MAX_LIVE="2",
        MAJORDOMUS_CAPABILITIES="",
    ).start()
    yield server
    server.close()


@pytest.fixture(scope="package")
def api_b(spawns: None, suite_redis_url: str, api: ApiProcess) -> Iterator[ApiProcess]:
    """A second API process on the same Redis (and the one tests restart)."""
    server = ApiProcess(suite_redis_url).start()
    yield server
    server.close()


class WorkerChild:
    """`python -m majordomus.cli worker` as a child process logging to a file (a pipe nobody
    reads would fill up and stall the worker)."""

    def __init__(self, redis_url: str, **extra: str) -> None:
        env = api_env(
            redis_url, MAJORDOMUS_SHUTDOWN_GRACE="1", MAJORDOMUS_CANCEL_GRACE="1", **extra
        )
        self.log = tempfile.NamedTemporaryFile(
            prefix="majordomus-worker-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "worker"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


@pytest.fixture(scope="package")
def worker_process_for_api(
    spawns: None, suite_redis_url: str, api: ApiProcess
) -> Iterator[WorkerChild]:
    """One worker process for the whole package."""
    worker = WorkerChild(suite_redis_url)
    client = redis_sync.Redis.from_url(suite_redis_url)
    deadline = time.monotonic() + 30
    while not client.zcard("md:workers"):
        if worker.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker did not report:\n{worker.output()}")
        time.sleep(0.05)
    client.close()
    yield worker
    worker.stop()


@pytest.fixture
def http(api: ApiProcess, worker_process_for_api: WorkerChild) -> Iterator[httpx.Client]:
    """A client of the package API, with a worker running behind it."""
    with api.client() as client:
        yield client


@pytest.fixture
def sync_redis(suite_redis_url: str) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis.from_url(suite_redis_url)
    yield client
    client.close()


# -- helpers -------------------------------------------------------------------------------------


def start(client: httpx.Client, capability: str, **inp: Any) -> dict[str, Any]:
    response = client.post(
        "/api/v1/executions/start", json={"capability": capability, "input": inp}
    )
    assert response.status_code == 200, response.text
    return response.json()


def wait_final(client: httpx.Client, execution_id: str, timeout_ms: int = 30_000) -> dict[str, Any]:
    response = client.get(
        "/api/v1/executions/wait", params={"id": execution_id, "timeout_ms": timeout_ms}
    )
    assert response.status_code == 200, response.text
    snapshot = response.json()
    assert snapshot["state"] in ("succeeded", "failed", "cancelled"), snapshot
    return snapshot


def all_events(client: httpx.Client, execution_id: str) -> list[dict[str, Any]]:
    page = client.get("/api/v1/executions/events", params={"id": execution_id}).json()
    return page["events"]


class Message:
    """One SSE message as a client sees it."""

    def __init__(self, event: str, data: str, id: str | None) -> None:
        self.event = event
        self.id = id
        self.data = json.loads(data) if data else None

    @property
    def is_control(self) -> bool:
        return self.event.startswith("stream.")

    def __repr__(self) -> str:
        return f"Message({self.event}, id={self.id})"


def read_stream(
    client: httpx.Client,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    until: Any = None,
    limit: int | None = None,
) -> tuple[int, list[Message]]:
    """Open the live channel, read messages until it ends, `until(message)` or `limit` events."""
    sent = {"Accept": "text/event-stream", **(headers or {})}
    messages: list[Message] = []
    with client.stream("GET", "/events", params=params, headers=sent) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, messages
        events = 0
        for sse in EventSource(response).iter_sse():
            message = Message(sse.event, sse.data, sse.id or None)
            messages.append(message)
            if not message.is_control:
                events += 1
            if until is not None and until(message):
                break
            if limit is not None and events >= limit:
                break
    return 200, messages


@contextlib.contextmanager
def own_deployment(redis_url: str, prefix: str, **env: str) -> Iterator[tuple[ApiProcess, Any]]:
    """An API and a worker of their own, on a key prefix of their own (so the package's API
    and worker never take what they start), once the worker reports; answers the API and a
    plain Redis client."""
    env = {"MAJORDOMUS_KEY_PREFIX": prefix, **env}
    server = ApiProcess(redis_url, **env).start()
    worker = WorkerChild(redis_url, **env)
    client = redis_sync.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 30
        while not client.zcard(f"{prefix}:workers"):
            if worker.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker did not report:\n{worker.output()}")
            time.sleep(0.05)
        yield server, client
    finally:
        client.close()
        worker.stop()
        server.close()


async def until(condition: Any, what: str) -> None:
    """Within the event loop: wait (up to 5 s) for `condition()`, else fail saying `what`."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")
