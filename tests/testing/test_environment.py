"""The testing kit's environment: a user's capabilities run by the real engine and workers in
the test's process, read back as any surface reads them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus import clock
from majordomus.store.connect import connect
from majordomus.testing import Environment
from tests.testing.capabilities import KIT, running


@pytest.fixture
async def env() -> AsyncIterator[Environment]:
    async with Environment(KIT) as opened:
        yield opened


async def test_an_execution_reports_its_steps_progress_logs_and_diagnostics_as_events(
    env: Environment,
) -> None:
    execution = await env.client.start("kit.note", {"text": "Ada"})
    assert await execution.result(timeout=10) == {"text": "Ada"}

    history = await execution.events()
    types = [e.type for e in history.events]
    assert types[:3] == ["execution.created", "execution.queued", "execution.started"]
    assert types[-1] == "execution.completed"
    data: dict[str, list[Any]] = {}
    for e in history.events:
        data.setdefault(e.type, []).append(getattr(e, "data", None))
    assert [d.name for d in data["execution.step.started"]] == ["write"]
    assert [(d.name, d.ok) for d in data["execution.step.completed"]] == [("write", True)]
    assert [(d.current, d.total) for d in data["execution.progress"]] == [(1, 2), (2, 2)]
    assert [d.message for d in data["execution.log"]] == ["noting Ada"]
    assert [d.code for d in data["execution.diagnostic"]] == ["kit.noted"]

    snap = await env.client.get(execution.id)
    assert snap.state == "succeeded"
    assert [s.name for s in snap.steps] == ["write"]
    assert [d.code for d in snap.diagnostics] == ["kit.noted"]


async def test_events_are_read_after_a_sequence(env: Environment) -> None:
    execution = await env.client.start("kit.note", {})
    await execution.wait(timeout=10)
    every = await env.client.events(execution.id)
    later = await env.client.events(execution.id, after=3)
    assert [e.sequence for e in later.events] == [e.sequence for e in every.events[3:]]


async def test_a_call_answers_the_output(env: Environment) -> None:
    assert await env.client.call("kit.note", {"text": "direct"}, timeout=10) == {"text": "direct"}


async def test_a_running_execution_is_cancelled(env: Environment) -> None:
    execution = await env.client.start("kit.linger", {"seconds": 60})
    await running(execution)
    await execution.cancel()
    snap = await execution.wait(timeout=10)
    assert snap.state == "cancelled"


async def test_a_killed_worker_writes_nothing_more(env: Environment) -> None:
    execution = await env.client.start("kit.linger", {"seconds": 60})
    await running(execution)
    before = await env.client.events(execution.id)

    killed = await env.kill_worker()
    await execution.cancel()  # asked of a worker that is gone: nobody ends it
    await asyncio.sleep(0.1)  # time passes: nobody ends it

    assert killed.killed and not killed.alive
    after = await env.client.events(execution.id)
    assert [e.type for e in after.events] == [e.type for e in before.events] + [
        "execution.cancelling"
    ]
    assert (await execution.refresh()).state == "cancelling"


async def test_capabilities_are_loaded_from_module_names() -> None:
    async with Environment(["tests.capabilities"]) as env:
        assert await env.client.call("tests.noop", {}, timeout=10) is not None


async def test_it_says_which_redis_it_runs_on_and_gives_the_wall_clock_back() -> None:
    async with Environment(KIT) as env:
        assert env.redis_kind == "fake"
        assert env.redis_description.startswith("in-process fakeredis")
        assert clock.in_use() is env.clock
        await env.skip(hours=5)
    assert clock.in_use() is clock.WALL
    assert abs(clock.now() - time.time()) < 1


async def test_two_environments_on_fakeredis_do_not_run_at_once() -> None:
    async with Environment(KIT):
        with pytest.raises(RuntimeError, match="one runs at a time"):
            async with Environment(KIT):
                pass
    async with Environment(KIT) as again:  # the first one's close freed the clock
        assert again.can_skip_time


async def test_more_workers_share_the_work(env: Environment) -> None:
    await env.start_worker()
    executions = [await env.client.start("kit.note", {"text": str(i)}) for i in range(10)]
    await env.skip()
    snaps = [await e.refresh() for e in executions]
    assert {s.state for s in snaps} == {"succeeded"}
    assert len(env.live_workers) == 2


async def test_on_a_given_redis_it_keeps_to_a_prefix_of_its_own_and_leaves_nothing(
    redis_url: str,
) -> None:
    async with Environment(KIT, redis=redis_url) as env:
        assert env.redis_kind == "url"
        prefix = env.settings.key_prefix  # type: ignore[union-attr]
        assert prefix.startswith("mdtest-")
        assert await env.client.call("kit.note", {"text": "shared"}, timeout=10) == {
            "text": "shared"
        }
        execution = await env.client.start("kit.linger", {"seconds": 60})
        await running(execution)
        await env.kill_worker()
        probe = connect(redis_url)
        try:
            assert await probe.exists(f"{prefix}:workers")
        finally:
            await probe.aclose(close_connection_pool=True)
    probe = connect(redis_url)
    try:
        assert [k async for k in probe.scan_iter(match=f"{prefix}:*")] == []
    finally:
        await probe.aclose(close_connection_pool=True)
