"""The reports buffer of an execution's context, against a real Redis: bounded (a handler
reporting faster than Redis takes it is slowed, never grows memory), kept across failed
writes and written in order, dense, once; what had to be given up is said in the history;
and the terminal event is retried until written."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from majordomus.config import Settings
from majordomus.context import REPORTS_LOST, ExecutionContext
from majordomus.engine import Engine
from majordomus.model import event_type_of
from majordomus.store.executions import AppendResult, EventWrite, Store
from majordomus.store.failures import UNREACHABLE
from tests.conftest import until
from tests.workers.test_outages import cut_between_worker_and, engine_on, history

WORKER = "test-worker"


async def running_execution(engine: Engine) -> str:
    """An execution in `running`, claimed by no real worker: the test reports as its handler."""
    snap = await engine.start("tests.noop", {})
    claim, _ = await engine.store.claim(snap.id, WORKER)
    assert claim.complete
    return snap.id


class SlowStore:
    """The real store, each append taking `delay` longer: Redis slower than the handler."""

    def __init__(self, store: Store, delay: float) -> None:
        self.store = store
        self.delay = delay
        self.appends = 0

    async def append(
        self, execution_id: str, events: list[EventWrite], **options: Any
    ) -> AppendResult:
        await asyncio.sleep(self.delay)
        self.appends += 1
        return await self.store.append(execution_id, events, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class CountedStore(SlowStore):
    """The real store, its appends that found Redis unreachable counted (`failed`)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, 0)
        self.failed = 0

    async def append(
        self, execution_id: str, events: list[EventWrite], **options: Any
    ) -> AppendResult:
        try:
            return await super().append(execution_id, events, **options)
        except UNREACHABLE:
            self.failed += 1
            raise

    async def failed_at_least(self, count: int) -> bool:
        return self.failed >= count


class AnswerLostOnce(SlowStore):
    """The first append is applied, and then its answer is lost (the connection dropped)."""

    async def append(
        self, execution_id: str, events: list[EventWrite], **options: Any
    ) -> AppendResult:
        result = await super().append(execution_id, events, **options)
        if self.appends == 1:
            raise UNREACHABLE[0]("Connection closed by server.")
        return result


async def assert_dense_and_complete(engine: Engine, xid: str, reports: int) -> list[str]:
    events = await history(engine, xid)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    types = [event_type_of(e) for e in events]
    assert types[:3] == ["execution.created", "execution.queued", "execution.started"]
    assert types[-1] == "execution.completed"
    assert len(types) == 3 + reports + 1
    return types


async def test_an_async_handler_reporting_faster_than_redis_is_held_at_the_bound(
    engine: Engine,
) -> None:
    xid = await running_execution(engine)
    slow = SlowStore(engine.store, 0.01)
    ctx = ExecutionContext(slow, xid, WORKER, max_events=50)  # type: ignore[arg-type]
    most = 0

    async def handler() -> None:
        nonlocal most
        for i in range(450):  # an execution keeps its last 500 events: all of these
            ctx.log(f"line {i}")  # not awaited: held at its next await instead
            most = max(most, ctx.pending()[0])
            if i % 10 == 9:
                await asyncio.sleep(0)

    await ctx.held(handler())
    assert 50 <= most <= 50 + 10  # reached the bound, and was held past what it reports between two awaits
    result = await ctx.finish("execution.completed", b'{"output":{}}')
    assert result.complete and result.state == "succeeded"
    await assert_dense_and_complete(engine, xid, 450)
    assert slow.appends < 450  # batched, not one round trip a report


async def test_an_awaited_report_waits_right_there(engine: Engine) -> None:
    xid = await running_execution(engine)
    ctx = ExecutionContext(SlowStore(engine.store, 0.01), xid, WORKER, max_events=20)  # type: ignore[arg-type]
    most = 0
    for i in range(300):
        await ctx.progress(i + 1, 300)
        most = max(most, ctx.pending()[0])
    assert 19 <= most <= 20  # reached the bound, never past it
    await ctx.finish("execution.completed", b'{"output":{}}')
    await assert_dense_and_complete(engine, xid, 300)


async def test_a_thread_handler_past_the_bound_blocks_its_thread(engine: Engine) -> None:
    xid = await running_execution(engine)
    ctx = ExecutionContext(
        SlowStore(engine.store, 0.01), xid, WORKER, max_events=1000, max_bytes=4096  # type: ignore[arg-type]
    )
    most = 0

    def handler() -> None:  # a plain def, as `call_handler` runs it: in a thread
        nonlocal most
        assert threading.current_thread() is not threading.main_thread()
        for i in range(450):
            ctx.log(f"line {i:04d} " + "x" * 40)
            most = max(most, ctx.pending()[1])

    await asyncio.to_thread(handler)
    assert 4096 - 100 <= most <= 4096  # reached the bound of bytes, never past it
    await ctx.finish("execution.completed", b'{"output":{}}')
    await assert_dense_and_complete(engine, xid, 450)


async def test_reports_wait_through_an_outage_and_are_written_in_order(
    engine: Engine, redis_url: str, settings: Settings
) -> None:
    xid = await running_execution(engine)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, settings) as mine:
        store = CountedStore(mine.store)
        ctx = ExecutionContext(store, xid, WORKER, max_events=100)  # type: ignore[arg-type]
        for i in range(20):
            ctx.step(f"s{i}")
            await asyncio.sleep(0.01)
        cut.cut()
        for i in range(20):
            ctx.step_done(f"s{i}")  # taken while Redis is away
        await until(lambda: store.failed_at_least(1))
        assert ctx.pending()[0] == 20  # kept across a failed write
        cut.restore()
        result = await ctx.finish("execution.completed", b'{"output":{}}')
    assert result.complete
    types = await assert_dense_and_complete(engine, xid, 40)
    assert types[3:-1] == ["execution.step.started"] * 20 + ["execution.step.completed"] * 20
    assert [s.state for s in (await engine.get(xid)).steps] == ["completed"] * 20


async def test_the_terminal_event_is_retried_until_written(
    engine: Engine, redis_url: str, settings: Settings
) -> None:
    xid = await running_execution(engine)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, settings) as mine:
        store = CountedStore(mine.store)
        ctx = ExecutionContext(store, xid, WORKER)  # type: ignore[arg-type]
        ctx.log("before the cut")
        await until(lambda: ctx_written(ctx))
        cut.cut()
        finishing = asyncio.create_task(ctx.finish("execution.completed", b'{"output":{}}'))
        await until(lambda: store.failed_at_least(2))
        assert not finishing.done()  # still trying, not given up
        cut.restore()
        result = await asyncio.wait_for(finishing, 10)
    assert result.complete and result.state == "succeeded"
    await assert_dense_and_complete(engine, xid, 1)


async def test_reports_given_up_after_the_outage_bound_are_said_in_the_history(
    engine: Engine, redis_url: str, settings: Settings, caplog: Any
) -> None:
    caplog.set_level(logging.WARNING, logger="majordomus.context")
    xid = await running_execution(engine)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, settings) as mine:
        ctx = ExecutionContext(mine.store, xid, WORKER, kept_seconds=0.5)
        ctx.log("written")
        await until(lambda: ctx_written(ctx))
        cut.cut()
        for i in range(7):
            ctx.log(f"lost {i}")

        async def given_up() -> bool:
            return ctx.reports_lost == 7

        await until(given_up)  # once the outage outlasted the half second they are kept
        cut.restore()
        ctx.log("after")
        result = await ctx.finish("execution.completed", b'{"output":{}}')
    assert result.complete and ctx.reports_lost == 7
    events = await history(engine, xid)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    types = [event_type_of(e) for e in events]
    assert types[3:] == [
        "execution.log", "execution.diagnostic", "execution.log", "execution.completed"
    ]
    diag = (await engine.get(xid)).diagnostics[0]
    assert diag.code == REPORTS_LOST and diag.summary.startswith("7 reports")
    assert any("gave up 7 reports" in r.getMessage() for r in caplog.records)


async def ctx_written(ctx: ExecutionContext) -> bool:
    """Whether every report made so far is written (none waits)."""
    return ctx.pending()[0] == 0


async def test_an_append_whose_answer_was_lost_is_not_written_twice(engine: Engine) -> None:
    xid = await running_execution(engine)
    store = AnswerLostOnce(engine.store, 0)
    ctx = ExecutionContext(store, xid, WORKER)  # type: ignore[arg-type]
    for i in range(5):
        ctx.log(f"line {i}")
    while not store.appends:
        await asyncio.sleep(0.001)
    for i in range(5, 10):  # reported while the writer waits to try again: the next batch
        ctx.log(f"line {i}")
    result = await ctx.finish("execution.completed", b'{"output":{}}')
    assert result.complete
    await assert_dense_and_complete(engine, xid, 10)
    lines = [e.data.message for e in await history(engine, xid) if event_type_of(e) == "execution.log"]
    assert lines == [f"line {i}" for i in range(10)]  # each once, in order


async def test_an_execution_redis_forgot_drops_its_reports_and_ends_quietly(
    engine: Engine, redis: Any
) -> None:
    xid = await running_execution(engine)
    ctx = ExecutionContext(engine.store, xid, WORKER)
    ctx.log("kept")
    await until(lambda: ctx_written(ctx))
    await redis.delete(*(await redis.keys(f"*{xid}*")))  # as a Redis come back empty would
    ctx.log("nowhere to go")
    result = await ctx.finish("execution.completed", b'{"output":{}}')
    assert not result.found and ctx.lost and ctx.forgotten


@pytest.mark.parametrize("awaited", [False, True])
async def test_a_cancelled_handler_held_at_the_bound_is_let_go(
    engine: Engine, redis_url: str, settings: Settings, awaited: bool
) -> None:
    xid = await running_execution(engine)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, settings) as mine:
        ctx = ExecutionContext(mine.store, xid, WORKER, max_events=5)
        cut.cut()

        async def handler() -> None:
            for i in range(100):
                report = ctx.log(f"line {i}")
                if awaited:
                    await report
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ctx.held(handler()))
        await asyncio.sleep(0.5)  # time passes: the handler stays held
        assert not task.done() and ctx.pending()[0] <= 6  # held while Redis is away
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cut.restore()
        # Its end: the cancel was never recorded (no store said `cancelling`), so the
        # context records it first, then the end, after the reports it had kept.
        ctx.request_cancel("server")
        result = await ctx.finish("execution.cancelled", b"")
    assert result.complete and result.state == "cancelled"
    types = [event_type_of(e) for e in await history(engine, xid)]
    assert types[-2:] == ["execution.cancelling", "execution.cancelled"]
    assert set(types[3:-2]) == {"execution.log"}
