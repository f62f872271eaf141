"""Pushed task status: `subscriptions/listen` with `taskIds` delivers `notifications/tasks` for
every status change and status message, from the API's one shared feed reader, with no
polling. Raw JSON-RPC over httpx: the official client's `listen()` has no `taskIds`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from tests.mcp.conftest import ApiProcess
from tests.mcp.test_tasks import DEMO, MISSING_CAPABILITY, Raw


@pytest.fixture
async def raw(api: ApiProcess) -> AsyncIterator[Raw]:
    client = Raw(api.url)
    yield client
    await client.aclose()


async def collect(messages: Any, until_status: str = "completed") -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    with anyio.fail_after(20):
        async for message in messages:
            got.append(message)
            if message.get("params", {}).get("status") == until_status:
                return got
    raise AssertionError(f"the stream ended first: {got}")


async def test_a_subscriber_is_told_of_every_step_and_the_result_without_polling(
    api: ApiProcess, raw: Raw, worker: Any
) -> None:
    created = await raw.task(DEMO, {"steps": 3, "delay_ms": 150}, episode="carol")
    mine = created["taskId"]
    theirs = (await raw.task("majordomus_tests_noop", {}, episode="dave"))["taskId"]
    async with raw.listen([mine, theirs, "not-a-task"], episode="carol") as messages:
        got = await collect(messages)
    ack, *notes = got
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    # Only the caller's own task is followed: the other owner's is left out, as unknown.
    assert ack["params"]["notifications"] == {"taskIds": [mine]}
    subscription = ack["params"]["_meta"][SUBSCRIPTION_ID_META_KEY]
    assert {n["method"] for n in notes} == {"notifications/tasks"}  # no progress, no log
    assert all(n["params"]["_meta"][SUBSCRIPTION_ID_META_KEY] == subscription for n in notes)
    assert all(n["params"]["taskId"] == mine for n in notes)
    messages_seen = [n["params"]["statusMessage"] for n in notes]
    for step in (1, 2, 3):
        assert f"Step {step} of 3 (running)" in " | ".join(messages_seen), messages_seen
    assert len(messages_seen) == len(set(messages_seen))  # told of each change once
    last = notes[-1]["params"]
    assert last["status"] == "completed" and last["result"]["structuredContent"]["steps"] == 3
    # The last notification is what tasks/get answers now.
    got_now = await raw.result("tasks/get", {"taskId": mine}, episode="carol")
    for key in ("status", "statusMessage", "createdAt", "lastUpdatedAt", "result"):
        assert got_now[key] == last[key], key


async def test_a_task_cancelled_while_followed_is_told_cancelled(
    api: ApiProcess, raw: Raw, worker: Any
) -> None:
    created = await raw.task("majordomus_tests_sleepy", {"seconds": 30})
    async with raw.listen([created["taskId"]]) as messages:
        async for message in messages:
            if message.get("params", {}).get("statusMessage") == "Sleeping (running)":
                break
        asked = time.monotonic()
        await raw.result("tasks/cancel", {"taskId": created["taskId"]})
        told = await collect(messages, until_status="cancelled")  # not the 30 s sleep's end
    print(f"told cancelled {time.monotonic() - asked:.2f} s after tasks/cancel")
    assert told[-1]["params"]["status"] == "cancelled"


async def test_listening_for_tasks_needs_the_extension(api: ApiProcess, raw: Raw) -> None:
    created = await raw.task("majordomus_tests_noop", {})
    async with raw.listen([created["taskId"]], extension=False) as messages:
        [answer] = [m async for m in messages]
    assert answer["error"]["code"] == MISSING_CAPABILITY
