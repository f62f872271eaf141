"""A capability's own tool, through the official client: a user's (or the demonstration)
runs on the workers as an execution, its progress forwarded as notifications of the call
when the caller sent a `progressToken`, and its output answered as the tool's result."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from mcp import Client

from majordomus.api.mcp.server import still_running
from majordomus.model import ExecutionSnapshot
from majordomus.registry import REGISTRY
from tests.mcp.conftest import MODES, ApiProcess, call


@pytest.mark.parametrize("mode", MODES)
async def test_a_direct_call_runs_as_an_execution_and_forwards_its_progress(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    notes: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    async with Client(api.url, mode=mode) as client:
        out = await call(
            client,
            "majordomus_demonstrate_execution",
            {"steps": 3, "delay_ms": 200, "log_lines": 1},
            progress_callback=on_progress,
        )
        assert out["steps"] == 3 and out["observed"] is True  # its reports became events
        listed = await call(
            client, "majordomus_executions", {"capability": "executions.demonstrate", "limit": 1}
        )
    newest = listed["executions"][0]
    assert newest["state"] == "succeeded" and newest["actor"] == "mcp" and newest["worker"]
    assert (3.0, 3.0, "3/3 step 3 of 3") in notes
    assert any(m and m.startswith("step step-2 started") for _, _, m in notes)
    values = [p for p, _, _ in notes]
    assert values == sorted(values)


@pytest.mark.parametrize("mode", MODES)
async def test_a_user_tool_runs_on_a_worker_with_no_progress_sent_unasked(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(api.url, mode=mode) as client:
        out = await call(client, "majordomus_tests_sleepy", {"seconds": 0.2})
        assert out["slept"] >= 0.2
        listed = await call(
            client, "majordomus_executions", {"capability": "tests.sleepy", "limit": 1}
        )
    assert listed["executions"][0]["state"] == "succeeded"
    assert listed["executions"][0]["worker"]


def test_a_call_that_outlasts_its_wait_says_where_the_execution_goes_on(api: ApiProcess) -> None:
    # The wait is LIMITS.wait_bound_ms (60 s): the answer's shape is shown on a queued
    # execution (no worker here), rather than by waiting a minute.
    queued = httpx.post(
        api.base + "/api/v1/tests/noop", json={}, headers={"Prefer": "respond-async"}
    )
    assert queued.status_code == 202, queued.text
    snap = msgspec.convert(queued.json(), ExecutionSnapshot)
    result = still_running(snap, REGISTRY)
    assert result.is_error and result.structured_content is None
    text = result.content[0].text
    assert text.startswith(f"unavailable: tests.noop is still queued as {snap.id}")
    meta = result.meta["majordomus"]  # type: ignore[index]
    assert meta["error"]["correlation_id"] == snap.id
    assert "majordomus_execution_wait" in meta["error"]["suggestion"]
    assert meta["execution"]["id"] == snap.id and meta["execution"]["state"] == "queued"


async def calls_in_flight(api: ApiProcess) -> int:
    async with httpx.AsyncClient() as http:
        return int((await http.get(api.base + "/api/v1/live")).json()["calls"])


async def test_a_built_in_call_stops_when_its_caller_disconnects(api: ApiProcess) -> None:
    queued = httpx.post(
        api.base + "/api/v1/tests/sleepy", json={"seconds": 30}, headers={"Prefer": "respond-async"}
    ).json()  # no worker here: it stays queued, and a wait on it waits
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "majordomus_execution_wait",
            "arguments": {"id": queued["id"], "timeout_ms": 60_000},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {  # a 2026-07-28 request, self-contained, as raw JSON-RPC
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "majordomus_execution_wait",
    }
    assert await calls_in_flight(api) == 0
    async with httpx.AsyncClient(timeout=30) as http:

        async def call() -> None:
            async with http.stream("POST", api.url, json=body, headers=headers) as response:
                assert response.status_code == 200, (await response.aread()).decode()
                await response.aread()

        # The caller goes away while its call is in flight, whether or not the response's
        # head has come (the server sends it with the first bytes of the stream).
        caller = asyncio.ensure_future(call())
        for _ in range(100):
            if await calls_in_flight(api) == 1:
                break
            assert not caller.done(), caller.result()
            await anyio.sleep(0.05)
        else:
            raise AssertionError("the wait never began")
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller
        # Cancelling the call closed its connection: the caller is gone.
    for _ in range(100):
        if await calls_in_flight(api) == 0:
            break
        await anyio.sleep(0.05)
    else:
        raise AssertionError("the wait outlived its caller")
