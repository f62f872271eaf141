"""`stop_task`: a loop asked to stop does stop, even when a cancel is lost on its way (a
library may drop one: see tests/majordomus/test_connect.py), a failure it ends with is
logged, and the caller's own cancellation is never swallowed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from majordomus.loops import stop_task


async def test_a_child_that_loses_a_cancel_is_cancelled_again_until_it_ends() -> None:
    lost = 0

    async def deaf_then_stops() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost < 2:  # what a lost cancel looks like from outside: the loop goes on
                    lost += 1
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    continue
                raise

    task = asyncio.create_task(deaf_then_stops())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_task(task), 10)
    assert task.cancelled() and lost == 2


async def test_the_callers_cancellation_goes_on_up() -> None:
    deaf = True

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if not deaf:
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]

    child = asyncio.create_task(stubborn())
    stopper = asyncio.create_task(stop_task(child))
    await asyncio.sleep(0.05)  # time passes: the stop is under way
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert not child.done()  # still the caller's to end
    deaf = False
    await stop_task(child)
    assert child.cancelled()


async def test_a_failure_the_child_ended_with_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails_on_cancel() -> Any:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup went wrong") from None

    task = asyncio.create_task(fails_on_cancel(), name="cleanup-loop")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="majordomus"):
        await stop_task(task)
    [record] = [r for r in caplog.records if "cleanup-loop" in r.getMessage()]
    assert record.exc_info is not None and "cleanup went wrong" in str(record.exc_info[1])
