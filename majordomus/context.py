"""The handler context: how a handler reports, and learns it was asked to stop.

A handler is written once for every caller. Outside an execution (a direct call from a
route, a tool or a test) it gets a `Context` whose reports are free no-ops. Inside one it
gets an `ExecutionContext` whose reports become events. Reports are plain calls that never
wait on Redis: they join a buffer, and one writer sends whatever accumulated while the
previous write was in flight as the next atomic append, so a handler reporting in a tight
loop is never held to one round trip per event, order and density are kept, and every
report is written before the terminal event.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from majordomus.errors import MajordomusError
from majordomus.model import (
    ExecutionDiagnostic,
    LogData,
    LogStream,
    ProgressView,
    Severity,
    StepCompletedData,
    StepStartedData,
)
from majordomus.sanitize import sanitize_log_line

if TYPE_CHECKING:
    from majordomus.engine import Engine
    from majordomus.store.executions import AppendResult, EventWrite, Store

log = logging.getLogger("majordomus.context")
_encode = msgspec.json.encode

BATCH_EVENTS = 256
"""Events in one append call at most, so one call never holds Redis for long."""


class ExecutionCancelled(Exception):
    """Raised by a handler (or by `ctx.raise_if_cancelled()`) to stop because it was asked to."""


class Context:
    """What a handler is given outside an execution: every report is a no-op."""

    execution_id: str | None = None
    observed = False

    def __init__(
        self,
        engine: Engine | None = None,
        actor: str = "internal",
        episode: str | None = None,
        on_progress: Callable[[Any], Any] | None = None,
        connection: Any = None,
    ) -> None:
        self.engine = engine
        self.actor = actor
        self.episode = episode
        self.on_progress = on_progress
        """Called with each event an `executions.wait` sees (MCP forwards them as progress)."""
        self.connection = connection
        """The surface's handle on the caller's connection (an MCP session), or None."""

    def step(self, name: str, title: str | None = None) -> None:
        return None

    def step_done(self, name: str, ok: bool = True, detail: str | None = None) -> None:
        return None

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> None:
        return None

    def log(self, message: str, stream: LogStream = "handler") -> None:
        return None

    def diagnostic(
        self,
        severity: Severity,
        code: str,
        summary: str,
        detail: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        return None

    def cancelled(self) -> bool:
        return False

    def raise_if_cancelled(self) -> None:
        if self.cancelled():
            raise ExecutionCancelled()

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early (within milliseconds) when cancellation is asked for."""
        await asyncio.sleep(seconds)


class ExecutionContext(Context):
    """The context of one execution on a worker: reports become events."""

    execution_id: str
    observed = True

    def __init__(
        self, store: Store, execution_id: str, worker: str, engine: Engine | None = None
    ) -> None:
        super().__init__(engine, actor="internal")
        self.store = store
        self.execution_id = execution_id
        self.worker = worker
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._buffer: list[EventWrite] = []
        self._writer: asyncio.Task[None] | None = None
        self._cancel = asyncio.Event()
        self._cancel_flag = False
        self.lost = False
        """True once the store refused a report: the execution was ended elsewhere."""
        self.cancelled_by: str | None = None

    # -- reporting ------------------------------------------------------------------

    def step(self, name: str, title: str | None = None) -> None:
        self._emit("execution.step.started", _encode(StepStartedData(name, title or name)))

    def step_done(self, name: str, ok: bool = True, detail: str | None = None) -> None:
        self._emit("execution.step.completed", _encode(StepCompletedData(name, ok, detail)))

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> None:
        self._emit("execution.progress", _encode(ProgressView(max(0, int(current)), total, message)))

    def log(self, message: str, stream: LogStream = "handler") -> None:
        self._emit("execution.log", _encode(LogData(stream, sanitize_log_line(str(message)))))

    def diagnostic(
        self,
        severity: Severity,
        code: str,
        summary: str,
        detail: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        diag = ExecutionDiagnostic(severity, code, summary, detail, suggestion)
        self._emit("execution.diagnostic", _encode(diag))

    def _emit(self, event_type: str, data: bytes) -> None:
        if threading.get_ident() != self._loop_thread:
            # A plain `def` handler runs in a thread: hand the report to the loop in order.
            self._loop.call_soon_threadsafe(self._emit, event_type, data)
            return
        if self.lost:
            return
        self._buffer.append((event_type, data))
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_pending())

    async def _write_pending(self) -> None:
        try:
            while self._buffer and not self.lost:
                batch = self._buffer[:BATCH_EVENTS]
                del self._buffer[:BATCH_EVENTS]
                result = await self.store.append(self.execution_id, batch)
                if not result.complete:
                    self.lost = True
                    self._buffer.clear()
        except Exception:
            log.exception("execution_id=%s: writing reports failed", self.execution_id)
            self.lost = True
            self._buffer.clear()
        finally:
            self._writer = None

    async def finish(self, event_type: str, data: bytes) -> AppendResult:
        """Write every pending report, then the terminal event, and say how it went."""
        while self._writer is not None:
            await asyncio.shield(self._writer)
        pending = self._buffer + [(event_type, data)]
        self._buffer = []
        while len(pending) > BATCH_EVENTS:
            await self.store.append(self.execution_id, pending[:BATCH_EVENTS])
            del pending[:BATCH_EVENTS]
        return await self.store.append(self.execution_id, pending)

    # -- cancellation ---------------------------------------------------------------

    def request_cancel(self, by: str) -> None:
        if self._cancel_flag:
            return
        self.cancelled_by = by
        self._cancel_flag = True
        self._cancel.set()

    def cancelled(self) -> bool:
        return self._cancel_flag

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        try:
            await asyncio.wait_for(self._cancel.wait(), seconds)
        except TimeoutError:
            pass


def error_of(exc: BaseException, execution_id: str) -> MajordomusError:
    """The error an exception ends an execution with; unexpected ones say only `internal`."""
    if isinstance(exc, MajordomusError):
        return exc
    return MajordomusError(
        "internal",
        "the capability failed unexpectedly",
        f"search the server's output for execution_id={execution_id}",
        execution_id,
    )
