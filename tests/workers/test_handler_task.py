"""The handler runs in its execution's own task: a stop of the handler (a cancel ignored past
its grace, an execution ended elsewhere) is told from the worker's own teardown, and never
reaches the end being written after the handler; the task starts at once where Python can.
No Redis: this is the task discipline alone (`workers.runtime.Running`); the behaviours it
serves run end to end in test_executions.py and test_outages.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from majordomus.workers.runtime import Running
from majordomus.workers.worker import EAGER, started_now


def running() -> Running:
    return Running(ctx=None, capability="tests.any", slot=False)  # type: ignore[arg-type]


async def asleep(reached: asyncio.Event) -> None:
    """A handler's long wait, saying when it has begun (what a stop then interrupts)."""
    reached.set()
    await asyncio.sleep(10)


async def test_a_stop_swallowed_by_the_handler_leaves_the_rest_of_the_task_uncancelled() -> None:
    run = running()
    ended: list[str] = []

    first, second = asyncio.Event(), asyncio.Event()

    async def handler() -> str:
        try:
            await asleep(first)
        except asyncio.CancelledError:
            ended.append("stopped")
        try:  # stopped twice while it goes on ignoring it
            await asleep(second)
        except asyncio.CancelledError:
            ended.append("stopped again")
        return "done anyway"

    async def execution() -> tuple[str, int]:
        value = await run.handler(handler())
        await asyncio.sleep(0.01)  # the end being written: not cancelled
        me = asyncio.current_task()
        assert me is not None
        return value, me.cancelling()

    task = asyncio.create_task(execution())
    await first.wait()
    assert run.stop_handler()
    await second.wait()
    assert run.stop_handler()
    assert await task == ("done anyway", 0)
    assert ended == ["stopped", "stopped again"]


async def test_a_stop_reaches_the_handler_as_a_cancel_and_is_taken_back() -> None:
    run = running()
    reached = asyncio.Event()

    async def execution() -> str:
        try:
            await run.handler(asleep(reached))
        except asyncio.CancelledError:
            me = asyncio.current_task()
            assert me is not None and me.cancelling() == 0  # not the worker's teardown
            await asyncio.sleep(0.01)  # so the end can be written
            return "cancelled, end written"
        return "not stopped"

    task = asyncio.create_task(execution())
    await reached.wait()
    assert run.stop_handler()
    assert await task == "cancelled, end written"


async def test_the_workers_teardown_during_a_stop_still_ends_the_task() -> None:
    run = running()
    reached = asyncio.Event()

    async def execution() -> None:
        try:
            await run.handler(asleep(reached))
        except asyncio.CancelledError:
            me = asyncio.current_task()
            assert me is not None and me.cancelling() == 1  # the teardown is left pending
            raise

    task = asyncio.create_task(execution())
    await reached.wait()
    assert run.stop_handler()
    task.cancel()  # the worker torn down at the same moment
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_no_stop_after_the_handler_ended_reaches_the_end_being_written() -> None:
    run = running()
    writing = asyncio.Event()
    written = asyncio.Event()

    async def execution() -> str:
        await run.handler(asyncio.sleep(0))
        writing.set()
        await asyncio.sleep(0.05)  # the terminal append in flight
        written.set()
        return "written"

    task = asyncio.create_task(execution())
    await writing.wait()
    assert not run.stop_handler()  # too late: the handler is over
    assert await task == "written" and written.is_set()


async def test_a_taken_execution_starts_before_the_loop_turns_where_python_can() -> None:
    steps: list[str] = []

    async def execution() -> None:
        steps.append("handler started")
        await asyncio.sleep(0)

    task: Any = started_now(asyncio.get_running_loop(), execution())
    steps.append("returned")
    await task
    if EAGER:  # Python 3.12 and later: eager tasks
        assert steps == ["handler started", "returned"]
    else:
        assert steps == ["returned", "handler started"]
