"""Plain `def` handlers run on daemon threads (`majordomus.handler_threads`): a worker told
to stop while two of them are stuck ends their executions and exits within its graces, not
when the threads' sleeps end (it used to wait for them: 39 s for two 40 s sleeps)."""

from __future__ import annotations

import asyncio
import contextvars
import signal
import time
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.handler_threads import HandlerThreads, in_thread
from tests.conftest import until, wait_for_workers

pytestmark = pytest.mark.process


async def test_a_stopping_worker_does_not_wait_for_stuck_def_handlers(
    engine: Engine, redis: Any, worker_process: Any
) -> None:
    child = worker_process()  # shutdown and cancel graces of 1 s each
    await wait_for_workers(redis, 1)
    ids = [(await engine.start("tests.nap", {"seconds": 40})).id for _ in range(2)]

    async def both_running() -> bool:
        return all([(await engine.get(x)).state == "running" for x in ids])

    await until(both_running)
    told = time.monotonic()
    child.kill(signal.SIGTERM)
    # Within the two graces of 1 s: a worker that waited for its handlers' 40 s naps
    # would outlive this wait.
    code = await asyncio.to_thread(child.wait, 20)
    print(f"stopped {time.monotonic() - told:.1f} s after SIGTERM")
    assert code == 0, child.output()
    assert {(await engine.get(x)).state for x in ids} == {"cancelled"}  # noqa: C416


async def test_the_pool_reuses_an_idle_thread_and_hands_back_results_and_errors() -> None:
    pool = HandlerThreads("test-pool")
    loop = asyncio.get_running_loop()
    for _ in range(3):
        future: asyncio.Future[Any] = loop.create_future()
        pool.submit((loop, future, lambda x: x * 2, (21,), contextvars.copy_context()))
        assert await future == 42
    assert pool.started == 1
    with pytest.raises(ZeroDivisionError):
        await in_thread(lambda: 1 / 0)
