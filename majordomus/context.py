"""The handler context: how a handler reports, and learns it was asked to stop.

A handler is written once for every caller. Outside an execution (a direct call from a
route, a tool or a test) it gets a `Context` whose reports are free no-ops. Inside one it
gets an `ExecutionContext` whose reports become events. A report is a plain call that
does not wait on Redis: it joins the execution's buffer, and one writer sends whatever
accumulated while the previous write was in flight as the next atomic append, so a
handler reporting in a tight loop is never held to one round trip per event, and order
and density are kept.

The buffer is bounded (`MAX_PENDING_EVENTS`, `MAX_PENDING_BYTES`) and outlives failed
writes: while Redis is away the reports wait, in order, and are written when it answers
again. Past the bound the handler waits: a plain `def` handler's report call blocks its
thread until there is room; an async handler is held at its next `await` (or right at
the report, if it awaits what the report answers, `await ctx.log(...)`). Reports are given
up only when they cannot be written at all: the execution was ended or forgotten
elsewhere, Redis refused them, or an outage outlasted `REPORTS_KEPT_SECONDS`; the last two
leave an `execution.diagnostic` (`reports_lost`, with how many) in the history where they
were lost, so an execution never ends with reports silently missing. A batch whose answer
was lost is sent again with its token, so it is written once. The terminal event
(`finish`) follows every report and is retried until it is written, or until the
execution is gone or was ended by someone else.

A log line or a diagnostic that carries the value of one of the execution's secret inputs
(what its input schema marks sensitive: `Secret`, `format: password`, `writeOnly`) has it
replaced by `«redacted»` before it joins the buffer, so a secret a handler prints never
reaches the history. The worker passes those values (`secrets=`, from
`majordomus.schemas.secret_values`); a value shorter than `MIN_SECRET_CHARS` is left alone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from majordomus.errors import MajordomusError
from majordomus.loops import Failures, within
from majordomus.metrics import METRICS
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
from majordomus.schemas import secret_mask
from majordomus.states import FINAL
from majordomus.store.executions import AppendResult
from majordomus.store.failures import UNREACHABLE

if TYPE_CHECKING:
    from majordomus.registry import Registry
    from majordomus.store.executions import EventWrite, Store

log = logging.getLogger("majordomus.context")


class EngineView(Protocol):
    """What a context knows of the engine it runs on: a `majordomus.engine.Engine`, which
    makes contexts and so sits above this module (`majordomus.builtins.common.engine_of`
    gives a built-in the whole of it)."""

    registry: Registry

_encode = msgspec.json.encode
T = TypeVar("T")

BATCH_EVENTS = 256
"""Reports in one append call at most, so one call never holds Redis for long."""

MAX_PENDING_EVENTS = 10_000
"""Reports one execution may have waiting to be written; past it the handler waits."""

MAX_PENDING_BYTES = 4 * 1024 * 1024
"""Bytes of reports (type and JSON data) one execution may have waiting; past it the
handler waits. A single report larger than this is still taken when nothing waits."""

REPORTS_KEPT_SECONDS = 300.0
"""How long reports wait through an outage. Past it the waiting ones are given up, and a
`reports_lost` diagnostic saying how many is written as soon as Redis answers again."""

REPORTS_RETRY_CAP_SECONDS = 1.0
"""The longest wait between two attempts of the report writer during an outage, so the
history catches up within a second of Redis coming back."""

REPORTS_LOST = "reports_lost"
"""The diagnostic code of reports that were given up."""

_MAKING = threading.Lock()
"""Held while an execution context makes its lock (`ExecutionContext._lock`)."""


class ExecutionCancelled(Exception):
    """Raised by a handler (or by `ctx.raise_if_cancelled()`) to stop because it was asked to."""


class Reported:
    """What a report answers. A handler may ignore it, or await it to wait right there
    until its execution's buffer has room (at once when it has; outside an execution,
    always at once)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ExecutionContext | None = None) -> None:
        self._ctx = ctx

    def __await__(self) -> Generator[Any, None, None]:
        ctx = self._ctx
        if ctx is not None and ctx.over_bound():
            yield from ctx.room().__await__()


_AT_ONCE = Reported()


class Context:
    """What a handler is given outside an execution: every report is a no-op."""

    execution_id: str | None = None
    observed = False

    def __init__(
        self,
        engine: EngineView | None = None,
        actor: str = "internal",
        episode: str | None = None,
        on_progress: Callable[[Any], Any] | None = None,
        connection: Any = None,
        wait_bound_ms: int | None = None,
    ) -> None:
        self.engine = engine
        self.actor = actor
        self.episode = episode
        self.on_progress = on_progress
        """Called with each event an `executions.wait` sees (MCP forwards them as progress)."""
        self.connection = connection
        """The surface's handle on the caller's connection (an MCP session), or None."""
        self.wait_bound_ms = wait_bound_ms
        """The longest an `executions.wait` of this caller may take, where its surface's
        clients cut a call sooner than the protocol's bound (MCP: `mcp_call_seconds`)."""

    def step(self, name: str, title: str | None = None) -> Reported:
        return _AT_ONCE

    def step_done(self, name: str, ok: bool = True, detail: str | None = None) -> Reported:
        return _AT_ONCE

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> Reported:
        return _AT_ONCE

    def log(self, message: str, stream: LogStream = "handler") -> Reported:
        return _AT_ONCE

    def diagnostic(
        self,
        severity: Severity,
        code: str,
        summary: str,
        detail: str | None = None,
        suggestion: str | None = None,
    ) -> Reported:
        return _AT_ONCE

    def cancelled(self) -> bool:
        return False

    def raise_if_cancelled(self) -> None:
        if self.cancelled():
            raise ExecutionCancelled()

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early (within milliseconds) when cancellation is asked for."""
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class _Batch:
    """One append the writer attempts: a loss diagnostic first (when one is owed), then the
    oldest waiting reports, then the terminal event once no report waits."""

    events: list[EventWrite]
    announces: int
    """Lost reports the leading diagnostic announces (0: no diagnostic leads)."""
    reports: int
    terminal: bool
    token: str
    """The append's token (`Store.append`): the same batch sent again is applied once."""
    drops: int
    """The buffer's drop count when the batch was made: a batch made before reports were
    given up no longer matches the buffer's head, and is not sent again."""


class ExecutionContext(Context):
    """The context of one execution on a worker: reports become events."""

    execution_id: str
    observed = True

    def __init__(
        self,
        store: Store,
        execution_id: str,
        worker: str,
        engine: EngineView | None = None,
        *,
        max_events: int = MAX_PENDING_EVENTS,
        max_bytes: int = MAX_PENDING_BYTES,
        kept_seconds: float = REPORTS_KEPT_SECONDS,
        secrets: Iterable[str] = (),
    ) -> None:
        super().__init__(engine, actor="internal")
        self._mask = secret_mask(frozenset(secrets))
        """Replaces the execution's secret input values in a log line or a diagnostic."""
        self.store = store
        self.execution_id = execution_id
        self.worker = worker
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.kept_seconds = kept_seconds
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._reported = Reported(self)
        self._pending: deque[EventWrite] = deque()
        self._pending_bytes = 0
        self._scheduled = False
        self._closed = False
        self._terminal: EventWrite | None = None
        self._result: AppendResult | None = None
        self._error: BaseException | None = None
        self._unannounced = 0
        self._room_waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._kept_since: float | None = None
        self._drops = 0
        """How many times waiting reports were given up (see `_Batch.drops`)."""
        self._cancel = asyncio.Event()
        self._cancel_flag = False
        self.lost = False
        """True once the execution was ended elsewhere or forgotten: reports are dropped."""
        self.forgotten = False
        """True once Redis answered that it does not know the execution (it came back empty)."""
        self.reports_lost = 0
        """Reports given up (announced in the history, unless the execution was lost)."""
        self.cancelled_by: str | None = None
        self.began = time.monotonic()
        """When the worker took it on (for `majordomus_execution_duration_seconds`)."""

    # Made on first use, not with the context: a context is made between the take and the
    # handler, where each object costs tens of microseconds with the caches cold.

    @functools.cached_property
    def _lock(self) -> threading.Condition:
        """The buffer is shared with a plain-def handler's thread: every access holds this
        lock. Made once, under a lock of the module's, whichever thread asks first."""
        with _MAKING:
            made: threading.Condition | None = self.__dict__.get("_lock")
            if made is None:
                made = self.__dict__["_lock"] = threading.Condition(threading.Lock())
            return made

    @functools.cached_property
    def _failures(self) -> Failures:
        """The report writer's failures in a row (`_write`, on the loop only)."""
        return Failures(
            log,
            f"execution_id={self.execution_id}: writing its reports",
            cap=REPORTS_RETRY_CAP_SECONDS,
            traceback=False,
            loop="report_writer",
            fields={"execution_id": self.execution_id},
        )

    @property
    def written_end(self) -> str | None:
        """The final state this context's own terminal event set, once `finish` wrote it;
        None when it was not written by it (ended elsewhere, forgotten, refused, or not yet)."""
        result = self._result
        return result.state if result is not None and result.complete else None

    # -- reporting ------------------------------------------------------------------

    # Every text a handler reports is masked (`_mask`): a step's name, title and detail, a
    # progress message, a log line, a diagnostic.

    def step(self, name: str, title: str | None = None) -> Reported:
        mask = self._mask
        name = mask(str(name))
        data = StepStartedData(name, mask(str(title)) if title else name)
        return self._emit("execution.step.started", _encode(data))

    def step_done(self, name: str, ok: bool = True, detail: str | None = None) -> Reported:
        mask = self._mask
        data = StepCompletedData(mask(str(name)), ok, mask(str(detail)) if detail is not None else None)
        return self._emit("execution.step.completed", _encode(data))

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> Reported:
        shown = self._mask(str(message)) if message is not None else None
        view = ProgressView(max(0, int(current)), total, shown)
        return self._emit("execution.progress", _encode(view))

    def log(self, message: str, stream: LogStream = "handler") -> Reported:
        # Masked again once sanitized: an escape sequence inside a secret no longer hides it.
        text = self._mask(sanitize_log_line(self._mask(str(message))))
        return self._emit("execution.log", _encode(LogData(stream, text)))

    def masked(self, text: str) -> str:
        """`text` with this execution's secret values masked, as its reports are."""
        return self._mask(text)

    def diagnostic(
        self,
        severity: Severity,
        code: str,
        summary: str,
        detail: str | None = None,
        suggestion: str | None = None,
    ) -> Reported:
        mask = self._mask
        diag = ExecutionDiagnostic(
            severity,
            mask(str(code)),
            mask(str(summary)),
            mask(str(detail)) if detail is not None else None,
            mask(str(suggestion)) if suggestion is not None else None,
        )
        return self._emit("execution.diagnostic", _encode(diag))

    def note_cancelling(self, by: str) -> None:
        """Record `execution.cancelling{by}` in order with the reports (the worker asks its
        own executions to stop), written through outages like them."""
        self._emit("execution.cancelling", _encode({"by": by}))

    def _emit(self, event_type: str, data: bytes) -> Reported:
        size = len(event_type) + len(data)
        on_loop = threading.get_ident() == self._loop_thread
        with self._lock:
            if not on_loop:
                # A plain `def` handler runs in a thread: past the bound, it waits here.
                while self._pending and self._full(size) and not (self.lost or self._closed):
                    self._lock.wait()
            if self.lost or self._closed:
                return _AT_ONCE
            self._pending.append((event_type, data))
            self._pending_bytes += size
            kick = not self._scheduled
            self._scheduled = True
        if kick:
            if on_loop:
                self._start_writer()
            else:
                try:
                    self._loop.call_soon_threadsafe(self._start_writer)
                except RuntimeError:  # the loop is gone: the worker is stopping
                    pass
        return self._reported

    def _full(self, adding: int = 0) -> bool:
        return (
            len(self._pending) >= self.max_events
            or self._pending_bytes + adding > self.max_bytes
        )

    def over_bound(self) -> bool:
        """Whether the buffer is at its bound (an async handler then waits for room)."""
        with self._lock:
            return bool(self._pending) and self._full() and not (self.lost or self._closed)

    async def room(self) -> None:
        """Until the buffer is below its bound again (or nothing will be written anymore)."""
        while self.over_bound():
            waiter = self._loop.create_future()
            self._room_waiters.append(waiter)
            await waiter

    def held(self, handler: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        """`handler` (a coroutine), held at each `await` while the buffer is at its bound:
        how an async handler that does not await its reports is made to wait for room."""
        return held(handler, self)

    def pending(self) -> tuple[int, int]:
        """Reports waiting to be written, and their bytes."""
        with self._lock:
            return len(self._pending), self._pending_bytes

    # -- writing --------------------------------------------------------------------

    def _start_writer(self) -> None:
        if self._writer is None or self._writer.done():
            name = f"majordomus-reports-{self.execution_id}"
            self._writer = self._loop.create_task(self._write(), name=name)

    async def _write(self) -> None:
        """Until nothing waits: append the next batch; through an outage, keep it and retry.

        A batch whose append failed is sent again as it was, token and all: if the failed
        try was applied after all (its answer was lost), the store answers it as applied
        and writes nothing twice. Reports made meanwhile go in the next batch.
        """
        again: _Batch | None = None
        while True:
            with self._lock:
                valid = again is not None and again.drops == self._drops and not self._ended()
                batch = again if valid else self._next_batch()
                again = None
                if batch is None:
                    self._scheduled = False
                    self._wake()
                    return
            began = time.monotonic()
            try:
                result = await self.store.append(self.execution_id, batch.events, token=batch.token)
            except UNREACHABLE as exc:
                again = batch
                self._failures.failed(exc)
                self._give_up_if_outage_outlasted(began)
                await self._failures.pause()
                continue
            except Exception as exc:  # noqa: BLE001  Redis refused the batch: it cannot be written
                self._failures.failed(exc)
                self._refused(batch, exc)
                await self._failures.pause()
                continue
            self._failures.recovered()
            METRICS.events_appended(result.applied)
            self._kept_since = None
            self._settle(batch, result)

    def _ended(self) -> bool:
        return self._result is not None or self._error is not None

    def _next_batch(self) -> _Batch | None:
        if self._ended():
            return None  # ended: nothing more of it is written
        if self.lost:
            self._drop_reports()
        events: list[EventWrite] = []
        announces = self._unannounced if not self.lost else 0
        if announces:
            events.append(("execution.diagnostic", _loss_diagnostic(announces, self.kept_seconds)))
        reports = min(len(self._pending), BATCH_EVENTS)
        events.extend(islice(self._pending, reports))
        terminal = (
            self._terminal is not None
            and self._result is None
            and self._error is None
            and reports == len(self._pending)
        )
        if terminal:
            assert self._terminal is not None
            events.append(self._terminal)
        if not events:
            return None
        return _Batch(events, announces, reports, terminal, self.store.next_token(), self._drops)

    def _settle(self, batch: _Batch, result: AppendResult) -> None:
        """What an append's answer means for the buffer: written events leave it; a refusal
        ends the writing (the execution is gone or final) or skips one stale state move."""
        with self._lock:
            # Its reports are the buffer's head only while nothing was dropped since it was
            # made: the beat may have learned meanwhile that the execution is final (this
            # very batch's terminal event, applied, its answer not yet read) and emptied it.
            current = batch.drops == self._drops
            applied = result.applied
            if batch.announces and applied > 0:
                if current:
                    self._unannounced -= batch.announces
                applied -= 1
            if current:
                self._pop(min(applied, batch.reports))
            if result.complete:
                if batch.terminal:
                    self._result = result
                self._wake()
                return
            if not result.found or result.state in FINAL:
                self.lost = True
                self.forgotten = self.forgotten or not result.found
                self._drop_reports()
                if self._terminal is not None:
                    self._result = result
            elif batch.terminal and result.applied - (1 if batch.announces else 0) >= batch.reports:
                self._terminal_refused(result)
            elif current:
                # A state move that no longer applies (the user cancelled too): skip it.
                self._pop(1)
            self._wake()

    def _terminal_refused(self, result: AppendResult) -> None:
        assert self._terminal is not None
        if self._terminal[0] == "execution.cancelled" and result.state == "running":
            # The cancel this worker asked for was never recorded (Redis was away): record
            # it first, since a running execution moves to cancelled only through it.
            by = _encode({"by": self.cancelled_by or "server"})
            self._pending.append(("execution.cancelling", by))
            self._pending_bytes += len(by)
            return
        self._result = result

    def _refused(self, batch: _Batch, exc: Exception) -> None:
        """Redis refused the batch (not an outage): its reports are given up, and so is the
        terminal event if it was in it (`finish` raises the error)."""
        with self._lock:
            self._pop(batch.reports)
            self._lost_reports(batch.reports)
            if batch.terminal:
                self._error = exc
            self._wake()

    def _give_up_if_outage_outlasted(self, began: float) -> None:
        """`began`: when the failed attempt was made (the client's retries take a while),
        so the outage is counted from its first failing attempt."""
        now = time.monotonic()
        if self._kept_since is None:
            self._kept_since = began
        if now - self._kept_since < self.kept_seconds:
            return
        self._kept_since = now
        with self._lock:
            dropped = len(self._pending)
            if not dropped:
                return
            self._drops += 1
            self._pending.clear()
            self._pending_bytes = 0
            self._lost_reports(dropped)
            self._wake()
        log.warning(
            "execution_id=%s: gave up %d reports after %.0fs without Redis; its history "
            "will say so (%s)",
            self.execution_id,
            dropped,
            self.kept_seconds,
            REPORTS_LOST,
            extra={"execution_id": self.execution_id},
        )

    def _lost_reports(self, count: int) -> None:
        self.reports_lost += count
        self._unannounced += count

    def _pop(self, count: int) -> None:
        for _ in range(count):
            event_type, data = self._pending.popleft()
            self._pending_bytes -= len(event_type) + len(data)

    def _drop_reports(self) -> None:
        self.reports_lost += len(self._pending)
        self._drops += 1
        self._pending.clear()
        self._pending_bytes = 0
        self._unannounced = 0

    def _wake(self) -> None:
        """Let a waiting handler go on (the buffer shrank, or nothing more will be written):
        a thread blocked in a report, and async handlers waiting in `room()`."""
        self._lock.notify_all()
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._wake_room_waiters)
        else:
            self._wake_room_waiters()

    def _wake_room_waiters(self) -> None:
        waiters, self._room_waiters = self._room_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def ended_elsewhere(self, forgotten: bool) -> None:
        """The store says the execution is final or gone: nothing of it is written anymore."""
        with self._lock:
            self.lost = True
            self.forgotten = self.forgotten or forgotten
            self._drop_reports()
            self._wake()

    async def finish(self, event_type: str, data: bytes) -> AppendResult:
        """Write every pending report, then the terminal event, and say how it went.

        Through an outage it waits (retrying) until the terminal event is written, or the
        execution turns out gone or ended by someone else; reports it had to give up are
        announced just before (`reports_lost`). A report made after this is dropped.
        """
        with self._lock:
            self._closed = True
            self._terminal = (event_type, data)
            kick = not self._scheduled
            self._scheduled = True
            self._wake()  # a thread still blocked in a report is let go
        if kick:
            self._start_writer()
        while self._result is None and self._error is None:
            assert self._writer is not None
            await asyncio.shield(self._writer)
            if self._result is None and self._error is None:
                with self._lock:
                    kick = not self._scheduled
                    self._scheduled = True
                if kick:
                    self._start_writer()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    # -- cancellation ---------------------------------------------------------------

    def request_cancel(self, by: str) -> None:
        if self._cancel_flag:
            return
        self.cancelled_by = by
        self._cancel_flag = True
        self._cancel.set()

    def cancelled(self) -> bool:
        return self._cancel_flag

    async def wait_cancelled(self) -> None:
        """Until it is asked to stop (a cancel, its timeout, the worker's stop)."""
        await self._cancel.wait()

    async def sleep(self, seconds: float) -> None:
        await sleep_unless(self._cancel, seconds)


async def sleep_unless(cancel: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, waking as soon as `cancel` is set (a context's `sleep`)."""
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    await within(seconds, cancel.wait())


def _loss_diagnostic(count: int, kept_seconds: float) -> bytes:
    return _encode(
        ExecutionDiagnostic(
            "warning",
            REPORTS_LOST,
            f"{count} reports of this execution could not be written and are missing here",
            "Redis was unreachable for longer than reports are kept "
            f"({kept_seconds:g}s), or it refused them; the events around this "
            "one are intact",
            "look at the worker's log for this execution id around this time",
        )
    )


class Bounded(Protocol):
    """What holds a handler at its awaits: a buffer at its bound, and room made in it (an
    `ExecutionContext`'s, or a child process's window, `majordomus.children.child`)."""

    def over_bound(self) -> bool: ...

    async def room(self) -> None: ...


async def held(handler: Coroutine[Any, Any, T], ctx: Bounded) -> T:
    """`handler`, held at each of its `await`s while `ctx` is over its bound."""
    return await _Held(handler, ctx)


class _Held:
    """Drives a coroutine step by step, and before passing on each of its suspensions
    waits, while the context's buffer is at its bound, for room. Everything else (what it
    awaits, what it is sent, cancellation) passes through unchanged."""

    __slots__ = ("_coro", "_ctx")

    def __init__(self, coro: Coroutine[Any, Any, T], ctx: Bounded) -> None:
        self._coro = coro
        self._ctx = ctx

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, ctx = self._coro, self._ctx
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                if error is not None:
                    suspended_on = coro.throw(error)
                else:
                    suspended_on = coro.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if ctx.over_bound():
                try:
                    yield from ctx.room().__await__()
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # cancelled while held: the handler sees it
                    if isinstance(suspended_on, asyncio.Future):
                        suspended_on.cancel()
                    error = exc
                    continue
            try:
                value = yield suspended_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                error = exc


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
