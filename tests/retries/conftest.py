"""Fixtures of the retry scenarios: one API and one worker process for the package, on a
key prefix of their own (`rt`), loading the scenarios' capabilities; an in-test engine on
the same prefix with a private registry; and, for the worker-loss scenario, a pair of
worker processes on another prefix (`rk`) whose one can be killed without touching the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync

from majordomus.engine import Engine
from majordomus.loading import load_capabilities
from majordomus.model import ExecutionSnapshot
from majordomus.registry import Registry
from majordomus.store.connect import connect
from tests.api.conftest import ApiProcess, WorkerChild
from tests.conftest import _redis_url, make_settings
from tests.retries.workload import declare

PREFIX = "rt"
"""The package's API and worker."""
LOSS_PREFIX = "rk"
"""The worker-loss scenario's own pair of workers."""
LEASE_SECONDS = 2.0
CAPABILITIES = "tests.capabilities,tests.retries.capabilities"


def private_registry() -> Registry:
    registry = Registry()
    for cap in load_capabilities(["tests.capabilities"]):
        registry.add(cap)
    declare(registry)
    return registry


REGISTRY = private_registry()


def child_env(prefix: str, **extra: str) -> dict[str, str]:
    env = {
        "MAJORDOMUS_CAPABILITIES": CAPABILITIES,
        "MAJORDOMUS_KEY_PREFIX": prefix,
        "MAJORDOMUS_LEASE_SECONDS": str(LEASE_SECONDS),
        "MAJORDOMUS_POLL_SECONDS": "0.5",
    }
    env.update(extra)
    return env


def forget_prefix(url: str, prefix: str) -> None:
    """Remove every key of a prefix (what a run before left), nothing else of the database."""
    client = redis_sync.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def wait_for_workers(
    url: str, prefix: str, children: list[WorkerChild], timeout: float = 30
) -> None:
    client = redis_sync.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    try:
        while client.zcard(f"{prefix}:workers") < len(children):
            for child in children:
                if child.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"a worker did not report:\n{child.output()}")
            time.sleep(0.05)
    finally:
        client.close()


@dataclass
class Stack:
    api: ApiProcess
    worker: WorkerChild

    def http(self) -> httpx.Client:
        return self.api.client()


@pytest.fixture(scope="package")
def stack(spawns: None) -> Iterator[Stack]:
    """The package's API and worker (one execution at a time: a retry waiting for its
    backoff must leave that one slot free)."""
    url = _redis_url()
    forget_prefix(url, PREFIX)
    api = ApiProcess(url, **child_env(PREFIX))
    worker = WorkerChild(url, **child_env(PREFIX, MAJORDOMUS_MAX_JOBS="1"))
    try:
        api.start()
        wait_for_workers(url, PREFIX, [worker])
        yield Stack(api, worker)
    finally:
        worker.stop()
        api.close()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.http() as client:
        yield client


@contextlib.asynccontextmanager
async def engine_on(prefix: str) -> AsyncIterator[Engine]:
    url = _redis_url()
    settings = make_settings(url, key_prefix=prefix, lease_seconds=LEASE_SECONDS)
    engine = Engine(connect(url, socket_timeout=10), REGISTRY, settings)
    try:
        yield engine
    finally:
        await engine.aclose()


@pytest.fixture
async def engine(stack: Stack) -> AsyncIterator[Engine]:
    """An engine on the package's prefix (its registry the test process's own)."""
    async with engine_on(PREFIX) as e:
        yield e


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where a handler counts its attempts (one line each: the worker's pid, the token)."""
    return tmp_path / "attempts"


def attempts_in(marker: Path) -> list[list[str]]:
    if not marker.exists():
        return []
    return [line.split(" ") for line in marker.read_text().splitlines()]


async def chain_of(engine: Engine, first: str, timeout_ms: int = 20_000) -> list[ExecutionSnapshot]:
    """The executions of a retry chain from its first, each once final (or as it stands
    when it is still going at the timeout)."""
    deadline = time.monotonic() + timeout_ms / 1000
    chain = [await engine.wait(first, timeout_ms)]
    while isinstance(chain[-1].retried_as, str):
        left = max(0, int((deadline - time.monotonic()) * 1000))
        chain.append(await engine.wait(chain[-1].retried_as, left))
        assert len(chain) <= 10, "a chain longer than any policy here"
    return chain


def history(http: httpx.Client, execution_id: str) -> list[dict[str, Any]]:
    """An execution's events, read through the API (`executions.events`)."""
    response = http.get("/api/v1/executions/events", params={"id": execution_id})
    assert response.status_code == 200, response.text
    return list(response.json()["events"])
