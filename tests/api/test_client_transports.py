"""`majordomus.Client` on either transport, against a real API process and a real worker
process: one interface, the same answers, the same errors (`MajordomusError` with the
protocol's codes), whether it goes straight to Redis or through the HTTP API."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from majordomus import Client, MajordomusError, Pending, SyncClient
from majordomus.model import ExecutionEvent, event_type_of
from tests.api.conftest import TOKEN, ApiProcess, WorkerChild
from tests.capabilities import Count, Counted, Done, Empty, Sleep, boom, noop, plain, sleepy

pytestmark = pytest.mark.process


@pytest.fixture(params=["redis", "http"])
async def client(
    request: Any, api: ApiProcess, worker_process_for_api: WorkerChild, suite_redis_url: str
) -> Any:
    url = suite_redis_url if request.param == "redis" else api.url
    async with Client(url) as c:
        yield c


async def test_a_typed_start_answers_its_declared_output_on_either_transport(
    client: Client,
) -> None:
    execution = await noop.start(client, Empty())
    assert execution.snapshot.state == "queued"
    assert await execution.result(timeout=20) == Done()
    assert await plain.call(client, Count(events=4), timeout=20) == Counted(4)
    assert await client.call("tests.plain", {"events": 1}, timeout=20) == {"events": 1}


async def test_errors_carry_the_protocols_codes_on_either_transport(client: Client) -> None:
    with pytest.raises(MajordomusError) as bad:
        await client.start("tests.plain", {"events": "many"})
    assert bad.value.code == "invalid_input" and "/events" in bad.value.message
    with pytest.raises(MajordomusError) as unknown:
        await client.start("tests.nothing", {})
    assert unknown.value.code == "not_found"
    with pytest.raises(MajordomusError) as missing:
        await client.get("x-20261206T000000Z-00000000")
    assert missing.value.code == "not_found"
    with pytest.raises(MajordomusError) as failed:
        await boom.call(client, Empty(), timeout=20)
    assert failed.value.code == "internal" and failed.value.correlation_id


async def test_following_goes_from_the_history_to_live_and_resumes_on_either_transport(
    client: Client,
) -> None:
    execution = await client.start("tests.plain", {"events": 3})
    events = [m async for m in execution.follow() if isinstance(m, ExecutionEvent)]
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(events) + 1))
    assert event_type_of(events[-1]) == "execution.completed"
    again = [m async for m in client.follow(execution.id, after=2)]
    assert [m.sequence for m in again if isinstance(m, ExecutionEvent)] == sequences[2:]
    page = await client.events(execution.id, after=1, limit=1)
    assert [e.sequence for e in page.events] == [2]


async def test_options_cancel_and_list_on_either_transport(client: Client) -> None:
    later = await client.start(
        "tests.noop", {}, delay=timedelta(minutes=30), priority="low", idempotency_key=None
    )
    assert later.snapshot.due_at and later.snapshot.priority == "low"
    cancelled = await later.cancel()
    assert cancelled.execution.state == "cancelled"
    listed = await client.list(capability="tests.noop", limit=5)
    assert later.id in [e.id for e in listed.executions]
    running = await sleepy.start(client, Sleep(seconds=30))
    with pytest.raises(Pending):
        await running.result(timeout=0.5)
    await running.cancel()
    snap = await running.wait(timeout=20)
    assert snap.state == "cancelled"


async def test_a_start_may_shorten_its_capabilitys_timeout_on_either_transport(
    client: Client,
) -> None:
    execution = await sleepy.start(client, Sleep(seconds=30), time_limit=0.3)
    with pytest.raises(MajordomusError) as stopped:
        await execution.result(timeout=20)
    assert stopped.value.code == "timed_out" and "timeout of 0.3 s" in stopped.value.message


async def test_a_start_sent_again_with_its_key_answers_the_same_execution(
    client: Client,
) -> None:
    key = f"resend-{id(client)}"
    first = await client.start("tests.noop", {}, idempotency_key=key)
    second = await client.start("tests.noop", {}, idempotency_key=key)
    assert second.id == first.id
    with pytest.raises(MajordomusError) as other:
        await client.start("tests.plain", {}, idempotency_key=key)
    assert other.value.code == "refused" and first.id in other.value.message


async def test_the_http_transport_sends_the_token_and_a_wrong_one_is_forbidden(
    locked_api: ApiProcess, worker_process_for_api: WorkerChild
) -> None:
    async with Client(locked_api.url, token=TOKEN) as c:
        out = await c.call("executions.demonstrate", {"steps": 3, "delay_ms": 0}, timeout=20)
        assert out["steps"] == 3 and out["observed"] is True
    async with Client(locked_api.url, token="wrong") as c:
        with pytest.raises(MajordomusError) as refused:
            await c.get("x-20261206T000000Z-00000000")
    assert refused.value.code == "forbidden"
    assert "answered 401" in refused.value.message and "token=" in (refused.value.suggestion or "")


async def test_an_api_away_is_unavailable() -> None:
    async with Client("http://127.0.0.1:1") as c:
        with pytest.raises(MajordomusError) as away:
            await c.start("tests.noop", {})
    assert away.value.code == "unavailable"


def test_the_sync_client_over_http_follows_with_a_plain_iterator(
    api: ApiProcess, worker_process_for_api: WorkerChild
) -> None:
    with SyncClient(api.url) as c:
        execution = plain.start(c, Count(events=2))
        types = [event_type_of(m) for m in execution.follow() if isinstance(m, ExecutionEvent)]
        assert types[0] == "execution.created" and types[-1] == "execution.completed"
        assert execution.result(timeout=20) == Counted(2)
        assert c.wait(execution.id).state == "succeeded"


async def test_the_sync_client_runs_beside_a_running_loop(api: ApiProcess) -> None:
    """A notebook, or an async framework's thread, has a loop running: the sync client
    runs its own in a thread of its own, so it works there too."""
    assert asyncio.get_running_loop().is_running()
    with SyncClient(api.url) as c:
        assert c.list(limit=1).count >= 0
