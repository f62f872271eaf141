"""The report writer's race (issue: a worker logged `IndexError: pop from an empty deque`
for an execution that had succeeded with a complete history, and counted it failed): the
beat learns the execution is final (its own terminal batch was applied, its answer not yet
read) and drops the buffer; the answer then arrives for reports no longer in it. Each
interleaving is forced here, against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from majordomus.context import ExecutionContext
from majordomus.engine import Engine
from majordomus.store.executions import AppendResult, EventWrite, Store
from tests.majordomus.test_context_buffer import (
    WORKER,
    assert_dense_and_complete,
    running_execution,
)


class EndedElsewhereMeanwhile:
    """The real store; once an append with the terminal event is applied, and before its
    answer is read, the beat's `ended_elsewhere` runs (it read the state: final)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ctx: ExecutionContext | None = None

    async def append(
        self, execution_id: str, events: list[EventWrite], **options: Any
    ) -> AppendResult:
        result = await self.store.append(execution_id, events, **options)
        if self.ctx is not None and any(t == "execution.completed" for t, _ in events):
            state = (await self.store.states([execution_id]))[0]
            assert state == "succeeded"
            self.ctx.ended_elsewhere(forgotten=False)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize("reports", [0, 5, 300])
async def test_a_terminal_batch_answered_after_the_beat_dropped_the_buffer_still_counts(
    engine: Engine, reports: int
) -> None:
    xid = await running_execution(engine)
    store = EndedElsewhereMeanwhile(engine.store)
    ctx = ExecutionContext(store, xid, WORKER)  # type: ignore[arg-type]
    store.ctx = ctx
    for i in range(reports):
        ctx.log(f"line {i}")
    result = await ctx.finish("execution.completed", b'{"output":{"ok":true}}')
    assert result.complete and result.state == "succeeded"
    assert ctx.written_end == "succeeded"  # counted as what it was
    assert ctx.pending() == (0, 0)
    await assert_dense_and_complete(engine, xid, reports)
