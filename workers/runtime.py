"""What one worker process holds: its executions, its lease, its signals, its sweeper.

`WorkerRuntime.run_taken` runs one execution the worker took: the take already moved it
queued -> running (an atomic step only one worker can win, so an execution never runs
twice) and answered its worker-only input; this runs the handler with a reporting context
and ends it with exactly one terminal event; a failure its capability's retry policy
retries starts the chain's next attempt first (`majordomus.retries`), so the link exists
before the failure is seen. Beside that the runtime keeps the worker's lease and presence
fresh, listens for wake-up and cancel signals on one pub/sub connection, and sweeps executions
whose worker stopped renewing its lease. Every read and write goes through the store; no
Redis command is named here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import msgspec

from majordomus.attempts import start_next_attempt
from majordomus.children.pool import ChildDied, Children
from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.context import ExecutionCancelled, ExecutionContext, error_of
from majordomus.engine import Engine, call_handler, output_decoder
from majordomus.errors import MajordomusError
from majordomus.loops import Failures, stop_task, within
from majordomus.metrics import METRICS
from majordomus.model import ExecutionDiagnostic
from majordomus.registry import Capability, Registry
from majordomus.retries import attempts_left, exhausted
from majordomus.schemas import has_sensitive, redact, secret_values
from majordomus.states import FINAL
from majordomus.store.connect import RedisClient
from majordomus.store.executions import encode
from majordomus.store.failures import UNREACHABLE
from majordomus.store.queue import Taken
from majordomus.store.sealing import SealError
from majordomus.store.workers import Presence
from majordomus.sweeper import Sweeper, concurrency_of, failed_data, per_key_of

log = logging.getLogger("majordomus.worker")
T = TypeVar("T")

SUBSCRIBE_WAIT_SECONDS = 10.0
"""How long a starting worker waits for its signal subscription before it polls without."""

LISTENER_RETRY_CAP_SECONDS = 1.0
"""The longest wait between two subscription attempts while Redis is away: wake-ups and
cancels are heard again within a second of its return."""

RETRY_START_SECONDS = 300.0
"""How long a worker keeps trying, through an outage, to start the retry of an attempt
that failed retryably (as long as its reports are kept, `REPORTS_KEPT_SECONDS`); past it the
attempt ends failed, unretried. (Its lease may lapse sooner: the sweeper then fails it and
starts the same next attempt, found by its idempotency key.)"""

RETRY_START_RETRY_CAP_SECONDS = 1.0
"""The longest wait between two tries at starting a retry while Redis is away."""

EXCEPTION_CODE = "execution.exception"
"""The diagnostic an unexpected exception adds: its type and message (`failure_details`)."""
EXCEPTION_CHARS = 500
"""The longest an exception's shown text is (its type and message); a longer one is cut."""
TIMEOUT_CODE = "execution.timed_out"
"""The diagnostic of an execution stopped at its timeout, saying the bound."""
OUTPUT_CODE = "execution.output_invalid"
"""The diagnostic of an output that is not its capability's declared type."""
CHILD_DIED_CODE = "execution.child_died"
"""The diagnostic of an execution whose child process died under it, saying how."""


class TimedOut(MajordomusError):
    """An execution that ran past its capability's timeout, and was stopped."""

    def __init__(self, cap: Capability, seconds: float, execution_id: str) -> None:
        super().__init__(
            "timed_out",
            f"{cap.id} ran past its timeout of {seconds:g} s and was stopped",
            "declare a longer timeout on the capability (@capability(..., timeout=...)), "
            "or make the handler faster",
            execution_id,
        )
        self.seconds = seconds


class OutputInvalid(MajordomusError):
    """A handler answered what its declared output type refuses: nothing of it is stored."""

    def __init__(self, cap: Capability, problem: str, execution_id: str) -> None:
        name = getattr(cap.output, "__name__", str(cap.output))
        super().__init__(
            "internal",
            f"{cap.id} answered an output that is not a {name}: {problem}",
            f"return a {name} from the handler (see its output schema: majordomus "
            f"capabilities describe {cap.id})",
            execution_id,
        )


def checked_output(cap: Capability, output: Any, execution_id: str) -> bytes:
    """The handler's answer as the JSON stored and answered, once its declared output type
    takes it (a Struct's members are not checked when it is made, nor a dict's ever);
    `OutputInvalid`, naming the member and what was wrong, when it does not."""
    payload = encode(output)
    try:
        output_decoder(cap.output).decode(payload)
    except msgspec.ValidationError as exc:
        raise OutputInvalid(cap, str(exc), execution_id) from None
    return payload


def exception_text(exc: BaseException, ctx: ExecutionContext) -> str:
    """An unexpected exception as a person reads it (`ValueError: ...`), its secrets masked
    as the execution's reports are, cut to `EXCEPTION_CHARS`."""
    message = str(exc).strip()
    name = getattr(exc, "type_name", None) or type(exc).__name__  # a child's, by its name
    text = ctx.masked(f"{name}: {message}" if message else name)
    return text if len(text) <= EXCEPTION_CHARS else text[: EXCEPTION_CHARS - 1] + "…"


def _report(ctx: ExecutionContext, diag: ExecutionDiagnostic) -> None:
    ctx.diagnostic(diag.severity, diag.code, diag.summary, diag.detail, diag.suggestion)


class Running:
    """One execution this worker is running.

    Its handler runs in the execution's own task (`MajordomusWorker._start`), not in one of
    its own: a task more would cost a turn of the event loop between the take and the
    handler. So the handler is stopped (a cancel ignored past its grace, an execution ended
    elsewhere) by cancelling that task while the handler runs (`stop_handler`), and the
    runner tells those cancels (`stops`: it goes on to write the end) from the worker's own
    teardown (it stops)."""

    def __init__(self, ctx: ExecutionContext, capability: str, slot: bool) -> None:
        self.ctx = ctx
        self.capability = capability
        self.slot = slot
        self.key: str | None = None
        """The key whose slot it holds (its capability's `per_key`), renewed by each beat."""
        self.task: asyncio.Task[Any] | None = None
        """The execution's task, while its handler runs (None before and after)."""
        self.stops = 0
        """How many times `stop_handler` cancelled the handler (not the worker's teardown)."""
        self.force_timer: asyncio.TimerHandle | None = None
        self.timeout_timer: asyncio.TimerHandle | None = None
        self.start_timeout_ms: int | None = None
        """Its start's own bound on its running time, if it gave one (its retries keep it)."""
        self.timed_out: float | None = None
        """The timeout it ran past (seconds), once it did: its end is `timed_out`."""
        self.forgotten = False
        """Redis was found not to know it (said once in the log, by the beat)."""

    async def handler(self, running: Awaitable[T]) -> T:
        """Await the handler in this task: `stop_handler` cancels it only meanwhile, and its
        cancel is taken back once it has reached the handler, so that only the worker's
        own teardown is left pending on the task."""
        me = asyncio.current_task()
        self.task = me
        try:
            return await running
        finally:
            self.task = None
            for _ in range(min(self.stops, me.cancelling() if me is not None else 0)):
                me.uncancel()  # type: ignore[union-attr]

    def stop_handler(self) -> bool:
        """Cancel the handler if it is still running (never the end being written after
        it); True when it was."""
        task = self.task
        if task is None or task.done():
            return False
        self.stops += 1
        task.cancel()
        return True


class WorkerRuntime:
    def __init__(self, redis: RedisClient, registry: Registry, settings: Settings) -> None:
        self.settings = settings
        self.engine = Engine(redis, registry, settings)
        self.store = self.engine.store
        self.registry = registry
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"
        self.started_at = now_stamp()[0]
        self.running: dict[str, Running] = {}
        self.wake = asyncio.Event()
        self.woken_by: str | None = None
        """The execution the last wake-up named (its partition has work): the next take
        visits that partition first (`take_hint`)."""
        self.accepting = True
        self.draining = False
        """An operator drained it (`queue.drain`), as its last beat read: it takes nothing new."""
        self._tasks: list[asyncio.Task[None]] = []
        self._forgotten: list[str] = []
        """Executions Redis no longer knew, not yet said in the log (the beat says them once)."""
        self.declarations_published = False
        self.beat_ok_at: float | None = None
        """When the last beat that renewed every partition's lease was sent."""
        self.partition_beats: list[float | None] = [None] * settings.partitions
        """Per partition, when the last beat that renewed its lease was sent."""
        self._partial_beats = 0
        """Beats in a row that renewed some partitions' leases only (said once in the log)."""
        self.children = Children(settings)
        """The child processes of the capabilities that run in one (`majordomus.children`)."""

    # -- life -----------------------------------------------------------------------

    async def start(self) -> None:
        """Announce the worker and start its loops. Redis away at this moment (a blip after
        the start-up check) does not stop it: the loops retry as they always do."""
        try:
            await self.beat()
        except Exception as exc:  # noqa: BLE001  the beat loop announces it when Redis answers
            log.warning("the first beat failed (%s); it is retried with the next ones", exc)
        in_children = [cap for cap in self.registry if cap.runs_in == "process"]
        self.children.warm(in_children)
        subscribed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._listen(subscribed), name="majordomus-signals"),
            asyncio.create_task(self._beat_forever(), name="majordomus-lease"),
            asyncio.create_task(self._sweep_forever(), name="majordomus-sweeper"),
        ]
        if in_children:
            self._tasks.append(
                asyncio.create_task(self.children.trim_forever(), name="majordomus-children")
            )
        if not await within(SUBSCRIBE_WAIT_SECONDS, subscribed.wait()):
            log.warning(
                "not subscribed to signals after %.0fs; polling until it is", SUBSCRIBE_WAIT_SECONDS
            )

    async def stop(self) -> None:
        for task in self._tasks:
            await stop_task(task, log)
        await self.children.close()
        with contextlib.suppress(Exception):
            await self.store.remove_worker(self.worker_id)

    async def _listen(self, subscribed: asyncio.Event) -> None:
        """Wake-up and cancel signals, on one pub/sub connection for the whole worker.

        When the subscription breaks (Redis went away, or answered nothing for a while) it
        backs off and subscribes again; a cancel published meanwhile is caught by the beat.
        """
        failures = Failures(log, "the signal listener", cap=LISTENER_RETRY_CAP_SECONDS)
        # Where a worker with room waits in Redis for a start (`can_block`), the wake-up
        # list is its signal: hearing the channel too would put a message to read on the
        # path from every start to its handler. The channel stays for the other layouts and
        # for the workers of a release before this one (rolling upgrades).
        wake = not self.store.can_block
        while True:
            signals = None
            try:
                signals = await self.store.subscribe_signals(wake=wake)
                subscribed.set()
                self.wake.set()  # anything enqueued while we were not listening
                failures.recovered()
                async for signal in signals:
                    if signal.kind == "cancel":
                        self._on_cancel(signal.execution_id)
                    elif signal.execution_id not in self.running:  # else taken here already
                        self.woken_by = signal.execution_id
                        self.wake.set()
            except Exception as exc:  # noqa: BLE001  back off, then listen again
                failures.failed(exc)
                await failures.pause()
            finally:
                if signals is not None:
                    await signals.aclose()

    def take_hint(self) -> str | None:
        """The execution the last wake-up named, once (None when none did since)."""
        hint, self.woken_by = self.woken_by, None
        return hint

    def _on_cancel(self, execution_id: str, by: str = "user") -> None:
        run = self.running.get(execution_id)
        if run is None or run.ctx.cancelled():
            return
        run.ctx.request_cancel(by)
        run.force_timer = asyncio.get_running_loop().call_later(
            self.settings.cancel_grace, self._force_stop, execution_id
        )

    def _time_out(self, execution_id: str, seconds: float) -> None:
        """Its timeout passed: ask it to stop as a cancel asks, and stop it past the grace
        (an async handler's task is cancelled; a plain `def`'s thread cannot be, so its
        execution ends and its slot is freed while the thread runs out in the background)."""
        run = self.running.get(execution_id)
        if run is None or run.timed_out is not None or run.ctx.cancelled():
            return  # gone, or already asked to stop (a cancel, the worker's stop)
        run.timed_out = seconds
        log.warning(
            "execution_id=%s ran past its timeout of %gs; stopping it",
            execution_id,
            seconds,
            extra={"execution_id": execution_id},
        )
        run.ctx.request_cancel("timeout")
        if run.force_timer is None:
            run.force_timer = asyncio.get_running_loop().call_later(
                self.settings.cancel_grace, self._force_stop, execution_id
            )

    def _force_stop(self, execution_id: str) -> None:
        run = self.running.get(execution_id)
        if run is not None and run.stop_handler():
            log.warning(
                "execution_id=%s ignored its cancel flag; stopping it",
                execution_id,
                extra={"execution_id": execution_id},
            )

    async def beat(self) -> None:
        """Renew the lease and publish presence (id, host, pid, started, running, last beat)."""
        # The whole lease: a worker silent for less (a Redis restart, a short cut) keeps its
        # executions; one silent for longer has them failed by the sweeper.
        lease_ms = int(self.settings.lease_seconds * 1000)
        stamp, ms = now_stamp()
        presence: Presence = {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": self.started_at,
            "running": len(self.running),
            "last_beat": stamp,
            "last_beat_ms": ms,
            "accepting": int(self.accepting and not self.draining),
        }
        sent_at = time.monotonic()
        beats = self.partition_beats

        def renewed_one(index: int) -> None:
            beats[index] = max(beats[index] or 0.0, sent_at)

        drained, renewed = await self.store.beat_partitions(
            self.worker_id,
            presence,
            ms,
            lease_ms,
            renewed=renewed_one,
            patience=self.settings.lease_seconds / 10,
        )
        for index in renewed:
            renewed_one(index)
        if len(renewed) == len(self.partition_beats):
            self.beat_ok_at = sent_at
        elif self._partial_beats == 0:
            log.warning(
                "the lease of partition(s) %s was not renewed (their Redis did not answer): "
                "taking from the others",
                ", ".join(str(i) for i in sorted(set(range(len(self.partition_beats))) - renewed)),
            )
        self._partial_beats = 0 if len(renewed) == len(self.partition_beats) else self._partial_beats + 1
        if drained != self.draining:
            await self._drained(drained)
            return
        if not self.declarations_published:
            # What it runs, for producers that start a capability without importing it
            # (`majordomus.declarations`): once, at the first beat that lands.
            await self.engine.publish_declarations()
            self.declarations_published = True
        held = [(r.capability, i) for i, r in self.running.items() if r.slot]
        keyed = [(r.capability, r.key, i) for i, r in self.running.items() if r.key is not None]
        await self.store.renew_slots(held, keyed)

    async def _drained(self, drained: bool) -> None:
        """Drained, or undrained, as the beat just read. Drained, a blocking take already
        waiting in Redis takes nothing (`stop_blocking`) and the poll loop takes no more
        (`MajordomusWorker`); what it runs goes on. Undrained, it takes again at once,
        unless it is stopping. Then a beat says so in its presence (`accepting`)."""
        self.draining = drained
        if drained:
            log.info("drained: taking no more work; %d running", len(self.running))
            await self.store.stop_blocking(self.worker_id)
        else:
            log.info("undrained: taking work again")
            if self.accepting:  # a stopping worker's mark stays
                await self.store.resume_blocking(self.worker_id)
            self.wake.set()
        await self.beat()

    @property
    def lease_in_doubt(self) -> bool:
        """Whether a beat is overdue in every partition (Redis was away): the lease may have
        lapsed, and the sweeper fails what a lapsed worker claims, so no work is taken until
        a beat lands."""
        return len(self.doubtful_partitions()) == len(self.partition_beats)

    def doubtful_partitions(self) -> frozenset[int]:
        """The partitions whose lease a beat has not renewed lately (their Redis, a master
        of a cluster, did not answer): takes pass them by."""
        if self.beat_ok_at is not None and time.monotonic() - self.beat_ok_at <= self._doubt_after:
            return frozenset()
        now = time.monotonic()
        return frozenset(
            i for i, at in enumerate(self.partition_beats) if at is None or now - at > self._doubt_after
        )

    def forget_beats(self) -> None:
        """A take found the lease lapsed: every partition in doubt until a beat lands."""
        self.beat_ok_at = None
        self.partition_beats = [None] * len(self.partition_beats)

    @property
    def _doubt_after(self) -> float:
        return self.settings.lease_seconds * 2 / 5

    async def _beat_forever(self) -> None:
        """Beat every fifth of the lease; after a failure, again as soon as Redis answers
        (trying every twentieth of the lease at most), so the lease is renewed by itself
        within moments of Redis coming back: the silence an outage costs is the outage, not
        the outage and a backoff, and a worker cut off for less than the lease less a beat
        interval keeps its executions."""
        interval = self.settings.lease_seconds / 5
        failures = Failures(log, "the lease renewal (beat)", cap=interval / 4)
        while True:
            await asyncio.sleep(failures.backoff() if failures.failing else interval)
            try:
                await self.beat()
                await self._catch_missed_cancels()
            except Exception as exc:  # noqa: BLE001  beat again, sooner
                failures.failed(exc)
                continue
            failures.recovered()

    async def _catch_missed_cancels(self) -> None:
        """A cancel published while the listener was away is still seen, a beat later; an
        execution that ended elsewhere, or that Redis forgot, has its handler stopped."""
        ids = list(self.running)
        states = await self.store.states(ids) if ids else []
        for execution_id, state in zip(ids, states, strict=True):
            if state == "cancelling":
                self._on_cancel(execution_id)
            elif state is None or state in FINAL:
                # Its report writer may have learned it first (and dropped its reports):
                # the handler is stopped here all the same.
                run = self.running.get(execution_id)
                if run is None:
                    continue
                run.ctx.ended_elsewhere(forgotten=state is None)
                if state is None and not run.forgotten:
                    run.forgotten = True
                    self._forgotten.append(execution_id)
                run.stop_handler()
        self._say_forgotten()

    def _say_forgotten(self) -> None:
        """One line for all the executions Redis forgot since the last beat (it came back
        empty, or lost them), not one per execution per beat."""
        if not self._forgotten:
            return
        ids, self._forgotten = self._forgotten, []
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        log.warning(
            "Redis no longer knows %d of the executions this worker was running (was it "
            "restarted empty?); their handlers are stopped: %s",
            len(ids),
            shown,
        )

    async def _sweep_forever(self) -> None:
        """This worker's candidacy for the cluster's one sweeper (`majordomus.sweeper`):
        it sweeps while elected and releases the lock when the worker stops."""
        await Sweeper(
            self.store,
            self.settings,
            f"worker:{self.worker_id}",
            concurrency_of(self.registry),
            engine=self.engine,
            per_key=per_key_of(self.registry),
        ).run()

    # -- one execution --------------------------------------------------------------

    async def run_taken(self, taken: Taken) -> str:
        """Run one execution this worker took and started (`take.lua`: it is `running`
        here, with its concurrency slot if its capability has a `max_concurrency`) to its
        end; answers how it ended (for the log only)."""
        execution_id = taken.execution_id
        cap = self.registry.get(taken.capability)
        if cap is None:
            return await self._fail_at_once(execution_id, MajordomusError(
                "not_found",
                f"no worker capability {taken.capability!r}",
                "load the module that declares it on the workers (MAJORDOMUS_CAPABILITIES)",
            ), "unknown capability")
        try:
            secret = self.store.sealer.open(taken.secret) if taken.secret else None
        except SealError as exc:  # altered in Redis, or its key is not among this worker's
            fields = {"execution_id": execution_id}
            log.error("execution_id=%s: %s", execution_id, exc.message, extra=fields)
            return await self._fail_at_once(execution_id, exc, "input sealed with an unknown key")
        return await self._run_claimed(
            cap, execution_id, secret, bool(cap.max_concurrency), taken.timeout_ms
        )

    async def _fail_at_once(self, execution_id: str, error: MajordomusError, why: str) -> str:
        """End a taken execution failed without running it, its end written as every end is
        (`ExecutionContext.finish`: kept and retried through an outage, so it never stays
        `running` on this live worker)."""
        ctx = ExecutionContext(self.store, execution_id, self.worker_id, self.engine)
        await ctx.finish("execution.failed", failed_data(error, execution_id))
        return why

    async def _run_claimed(
        self,
        cap: Capability,
        execution_id: str,
        secret: bytes | None,
        slot: bool,
        timeout_ms: int | None = None,
    ) -> str:
        ctx = ExecutionContext(
            self.store,
            execution_id,
            self.worker_id,
            self.engine,
            secrets=secret_values(cap.input, secret),
        )
        run = Running(ctx, cap.id, slot)
        if cap.per_key is not None:
            run.key = cap.per_key.key_of(msgspec.json.decode(secret or b"{}"))
        run.start_timeout_ms = timeout_ms
        self.running[execution_id] = run
        limit = cap.timeout or self.settings.default_timeout
        if timeout_ms:  # its start's own bound, within the capability's
            limit = min(limit, timeout_ms / 1000)
        run.timeout_timer = asyncio.get_running_loop().call_later(
            limit, self._time_out, execution_id, limit
        )
        try:
            if cap.runs_in == "process":  # decoded and held in its child, as it reports
                running = self.children.pool(cap).run(ctx, secret or b"{}")
            else:  # held at its awaits while its reports wait past their bound (`ctx.held`)
                value: Any = msgspec.json.decode(secret or b"{}", type=cap.input)
                running = ctx.held(call_handler(cap, ctx, value))
            try:
                output = await run.handler(running)
            except ExecutionCancelled as exc:
                return await self._end_stopped(run, exc, cap, secret)
            except asyncio.CancelledError as exc:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise  # the worker itself is being torn down
                return await self._end_stopped(run, exc, cap, secret)
            except Exception as exc:
                if run.timed_out is not None:
                    return await self._end_timed_out(run, cap, secret)
                return await self._end_failed(ctx, exc, cap, secret)
            if run.timed_out is not None:  # past its bound, even though it answered
                return await self._end_timed_out(run, cap, secret)
            try:
                payload = checked_output(cap, output, execution_id)
            except OutputInvalid as invalid:
                return await self._end_failed(ctx, invalid, cap, secret)
            if has_sensitive(cap.output):  # a member typed Secret is never stored
                payload = encode(redact(cap.output, msgspec.json.decode(payload)))
            result = await ctx.finish("execution.completed", b'{"output":' + payload + b"}")
            return result.state
        finally:
            if (ended := ctx.written_end) is not None:  # its terminal event is ours: count it
                METRICS.execution_finished(cap.id, ended, time.monotonic() - ctx.began)
            if run.force_timer is not None:
                run.force_timer.cancel()
            if run.timeout_timer is not None:
                run.timeout_timer.cancel()
            if ctx.forgotten and not run.forgotten:
                self._forgotten.append(execution_id)  # said by the next beat
            self.running.pop(execution_id, None)

    async def _end_stopped(
        self, run: Running, exc: BaseException, cap: Capability, secret: bytes | None
    ) -> str:
        """A handler that stopped when asked: at its timeout, or at a cancel."""
        if run.timed_out is not None and not run.ctx.lost:
            return await self._end_timed_out(run, cap, secret)
        return await self._end_cancelled(run.ctx, exc, cap, secret)

    async def _end_timed_out(self, run: Running, cap: Capability, secret: bytes | None) -> str:
        ctx, seconds = run.ctx, run.timed_out or 0.0
        METRICS.timed_out.add((cap.id,), 1.0)
        ctx.diagnostic(
            "error",
            TIMEOUT_CODE,
            f"stopped after its timeout of {seconds:g} s",
            f"asked to stop at {seconds:g} s, stopped at the latest "
            f"MAJORDOMUS_CANCEL_GRACE ({self.settings.cancel_grace:g} s) later",
        )
        return await self._end_failed(ctx, TimedOut(cap, seconds, ctx.execution_id), cap, secret)

    async def _end_cancelled(
        self, ctx: ExecutionContext, exc: BaseException, cap: Capability, secret: bytes | None
    ) -> str:
        if ctx.lost:
            return "lost"
        if not ctx.cancelled():
            return await self._end_failed(ctx, exc, cap, secret)
        result = await ctx.finish("execution.cancelled", b"")
        return result.state

    async def _end_failed(
        self, ctx: ExecutionContext, exc: BaseException, cap: Capability, secret: bytes | None
    ) -> str:
        execution_id = ctx.execution_id or ""
        error = error_of(exc, execution_id)
        fields = {"execution_id": execution_id}
        if isinstance(exc, OutputInvalid):
            log.error("execution_id=%s: %s", execution_id, exc.message, extra=fields)
            ctx.diagnostic("error", OUTPUT_CODE, exc.message, suggestion=exc.suggestion)
        elif isinstance(exc, ChildDied):
            log.error("execution_id=%s: %s", execution_id, exc.message, extra=fields)
            ctx.diagnostic(
                "error",
                CHILD_DIED_CODE,
                f"its child process died: {exc.how}",
                "the worker and its other executions go on; the pool starts another child",
                exc.suggestion,
            )
        elif error.code == "internal" and not isinstance(exc, MajordomusError):
            log.error("execution_id=%s failed", execution_id, exc_info=exc, extra=fields)
            if self.settings.failure_details:
                shown = exception_text(exc, ctx)
                ctx.diagnostic(
                    "error",
                    EXCEPTION_CODE,
                    shown,
                    suggestion=f"its traceback is in the worker's log: execution_id={execution_id}",
                )
                error = MajordomusError(
                    error.code, f"{error.message}: {shown}", error.suggestion, execution_id
                )
        if cap.retry is not None and cap.retry.retries(exc):
            await self._retry_before_failing(ctx, cap, secret)
        # What a handler raised may quote its secret input: masked as its reports are.
        shown_error = MajordomusError(
            error.code,
            ctx.masked(error.message),
            ctx.masked(error.suggestion) if error.suggestion else error.suggestion,
            execution_id,
        )
        result = await ctx.finish("execution.failed", failed_data(shown_error, execution_id))
        return result.state

    async def _retry_before_failing(
        self, ctx: ExecutionContext, cap: Capability, secret: bytes | None
    ) -> None:
        """A retryable failure, before its `execution.failed`: start the chain's next
        attempt (`majordomus.retries`) and say so in this one's history, or say that no
        attempt is left. Through an outage it keeps trying for `RETRY_START_SECONDS` (each
        try answers the one next attempt, however many were sent); a failure to start it
        otherwise (its input no longer valid, say) leaves this attempt failed, unretried,
        and says why in the log. A cancel asked of this attempt is never retried."""
        execution_id = ctx.execution_id
        failures = Failures(
            log,
            f"execution_id={execution_id}: starting its retry",
            cap=RETRY_START_RETRY_CAP_SECONDS,
            traceback=False,
            loop="retry_start",
            fields={"execution_id": execution_id},
        )
        deadline = time.monotonic() + RETRY_START_SECONDS
        # A timeout asks the handler to stop as a cancel does, but is a failure, retried
        # as its policy says (`timed_out` among its codes).
        while not ((ctx.cancelled() and ctx.cancelled_by != "timeout") or ctx.lost):
            try:
                await self._start_next_attempt(ctx, cap, secret)
                failures.recovered()
                return
            except UNREACHABLE as exc:
                failures.failed(exc)
                if time.monotonic() > deadline:
                    log.warning(
                        "execution_id=%s: its retry could not be started",
                        execution_id,
                        extra=failures.fields,
                    )
                    return
                await failures.pause()
            except Exception as exc:  # noqa: BLE001  it ends failed, unretried, as without a policy
                log.warning(
                    "execution_id=%s: its retry could not be started: %s",
                    execution_id,
                    exc,
                    extra=failures.fields,
                )
                return

    async def _start_next_attempt(
        self, ctx: ExecutionContext, cap: Capability, secret: bytes | None
    ) -> None:
        assert cap.retry is not None
        execution_id = ctx.execution_id
        snap = await self.engine.get(execution_id)
        if snap.state != "running":  # a cancel was asked of it, or it ended elsewhere
            return
        if not attempts_left(snap, cap.retry):
            _report(ctx, exhausted(snap, cap.retry))
            return
        run = self.running.get(execution_id)
        following = await start_next_attempt(
            self.engine, cap, snap, secret, timeout_ms=run.start_timeout_ms if run else None
        )
        # A cancel asks for cancelling, then looks for `retried_as`; this wrote `retried_as`
        # and looks for cancelling: at least one of the two sees the other and cancels the
        # next attempt, so a cancel racing the failure still ends the chain.
        if (await self.store.states([execution_id]))[0] == "cancelling":
            await self.engine.cancel(following.execution_id, by="retry")
            return
        _report(ctx, following.diagnostic())

    # -- stopping ---------------------------------------------------------------------

    async def cancel_all(self, by: str) -> None:
        """Ask every running execution to stop (a worker told to stop, past its grace); the
        `execution.cancelling` goes with the execution's reports, so an outage delays it
        but does not lose it."""
        for execution_id, run in list(self.running.items()):
            run.ctx.note_cancelling(by)
            self._on_cancel(execution_id, by)

