"""What one worker process holds: its executions, its lease, its signals, its sweeper.

`WorkerRuntime.run` is the body of the one arq job every execution is: claim it (an atomic
queued -> running that only one worker can win, so an execution never runs twice), read the
worker-only input, run the handler with a reporting context, and end it with exactly one
terminal event. Beside that the runtime keeps the worker's lease and presence fresh,
listens for wake-up and cancel signals on one pub/sub connection, and sweeps executions
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
from typing import Any

import msgspec

from majordomus.config import Settings
from majordomus.context import ExecutionCancelled, ExecutionContext, error_of
from majordomus.engine import Engine, call_handler
from majordomus.errors import MajordomusError
from majordomus.registry import Registry
from majordomus.store.clock import now_stamp
from majordomus.store.connect import RedisClient
from majordomus.store.executions import encode
from majordomus.store.workers import Presence

log = logging.getLogger("majordomus.worker")

WORKER_LOST = MajordomusError(
    "unavailable",
    "the worker running it stopped",
    "start it again; if this repeats, look at the worker's host for crashes or OOM kills",
)


class Running:
    """One execution this worker is running."""

    def __init__(self, ctx: ExecutionContext, capability: str, slot: bool) -> None:
        self.ctx = ctx
        self.capability = capability
        self.slot = slot
        self.task: asyncio.Task[Any] | None = None
        self.force_timer: asyncio.TimerHandle | None = None


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
        self.accepting = True
        self._tasks: list[asyncio.Task[None]] = []

    # -- life -----------------------------------------------------------------------

    async def start(self) -> None:
        await self.beat()
        subscribed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._listen(subscribed), name="majordomus-signals"),
            asyncio.create_task(self._beat_forever(), name="majordomus-lease"),
            asyncio.create_task(self._sweep_forever(), name="majordomus-sweeper"),
        ]
        await asyncio.wait_for(subscribed.wait(), 10)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self.store.remove_worker(self.worker_id)

    async def _listen(self, subscribed: asyncio.Event) -> None:
        """Wake-up and cancel signals, on one pub/sub connection for the whole worker."""
        while True:
            try:
                signals = await self.store.subscribe_signals()
                subscribed.set()
                self.wake.set()  # anything enqueued while we were not listening
                async for signal in signals:
                    if signal.kind == "cancel":
                        self._on_cancel(signal.execution_id)
                    else:
                        self.wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: back off, then listen again.
                log.warning("signal listener lost its connection (%s); retrying", exc)
                await asyncio.sleep(0.5)

    def _on_cancel(self, execution_id: str, by: str = "user") -> None:
        run = self.running.get(execution_id)
        if run is None or run.ctx.cancelled():
            return
        run.ctx.request_cancel(by)
        run.force_timer = asyncio.get_running_loop().call_later(
            self.settings.cancel_grace, self._force_stop, execution_id
        )

    def _force_stop(self, execution_id: str) -> None:
        run = self.running.get(execution_id)
        if run is not None and run.task is not None and not run.task.done():
            log.warning("execution_id=%s ignored its cancel flag; stopping it", execution_id)
            run.task.cancel()

    async def beat(self) -> None:
        """Renew the lease and publish presence (id, host, pid, started, running, last beat)."""
        lease_ms = int(self.settings.lease_seconds * 1000 / 2)
        stamp, ms = now_stamp()
        presence: Presence = {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": self.started_at,
            "running": len(self.running),
            "last_beat": stamp,
            "last_beat_ms": ms,
            "accepting": int(self.accepting),
        }
        await self.store.beat(self.worker_id, presence, ms, lease_ms)
        held = [(r.capability, i) for i, r in self.running.items() if r.slot]
        await self.store.renew_slots(held)

    async def _beat_forever(self) -> None:
        interval = self.settings.lease_seconds / 5
        while True:
            await asyncio.sleep(interval)
            try:
                await self.beat()
                await self._catch_missed_cancels()
            except Exception as exc:
                log.warning("lease renewal failed (%s)", exc)

    async def _catch_missed_cancels(self) -> None:
        """A cancel published while the listener reconnected is still seen, a beat later."""
        ids = list(self.running)
        if not ids:
            return
        for execution_id, state in zip(ids, await self.store.states(ids), strict=True):
            if state == "cancelling":
                self._on_cancel(execution_id)
            elif state is None or state in ("succeeded", "failed", "cancelled"):
                run = self.running.get(execution_id)
                if run is not None and run.task is not None and not run.task.done():
                    run.ctx.lost = True
                    run.task.cancel()

    async def _sweep_forever(self) -> None:
        interval = max(0.2, self.settings.lease_seconds / 10)
        ticks = 0
        while True:
            await asyncio.sleep(interval)
            try:
                await sweep_lost(self.engine)
                ticks += 1
                if ticks % max(1, int(60 / interval)) == 0:
                    await self.store.prune()
            except Exception as exc:
                log.warning("sweep failed (%s)", exc)

    # -- one execution --------------------------------------------------------------

    async def run(self, execution_id: str, capability_id: str) -> str:
        """Run one execution to its end; answers how it ended (for arq's log only)."""
        cap = self.registry.get(capability_id)
        if cap is None:
            await self.store.append(
                execution_id,
                [("execution.failed", _failed(MajordomusError(
                    "not_found",
                    f"no worker capability {capability_id!r}",
                    "load the module that declares it on the workers (MAJORDOMUS_CAPABILITIES)",
                ), execution_id))],
            )
            return "unknown capability"
        # A capability with `max_concurrency` got its slot when the job was taken
        # (take_job.lua); its terminal event frees it (append.lua).
        slot = bool(cap.max_concurrency)
        claim, secret = await self.store.claim(execution_id, self.worker_id)
        if not claim.complete:
            if slot:  # never ran, so no terminal event of ours frees the slot
                await self.store.release_slot(cap.id, execution_id, cap.max_concurrency or 0)
            return f"not run: it is {claim.state or 'gone'}"
        return await self._run_claimed(cap, execution_id, secret, slot)

    async def _run_claimed(self, cap: Any, execution_id: str, secret: bytes | None, slot: bool) -> str:
        ctx = ExecutionContext(self.store, execution_id, self.worker_id, self.engine)
        run = Running(ctx, cap.id, slot)
        self.running[execution_id] = run
        try:
            value = msgspec.json.decode(secret or b"{}", type=cap.input)
            handler = asyncio.ensure_future(call_handler(cap, ctx, value))
            run.task = handler
            try:
                output = await handler
            except ExecutionCancelled as exc:
                return await self._end_cancelled(ctx, exc)
            except asyncio.CancelledError as exc:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise  # the worker itself is being torn down
                return await self._end_cancelled(ctx, exc)
            except Exception as exc:
                return await self._end_failed(ctx, exc)
            result = await ctx.finish(
                "execution.completed", b'{"output":' + encode(output) + b"}"
            )
            return result.state
        finally:
            if run.force_timer is not None:
                run.force_timer.cancel()
            self.running.pop(execution_id, None)

    async def _end_cancelled(self, ctx: ExecutionContext, exc: BaseException) -> str:
        if ctx.lost:
            return "lost"
        if not ctx.cancelled():
            return await self._end_failed(ctx, exc)
        result = await ctx.finish("execution.cancelled", b"")
        return result.state

    async def _end_failed(self, ctx: ExecutionContext, exc: BaseException) -> str:
        execution_id = ctx.execution_id or ""
        error = error_of(exc, execution_id)
        if error.code == "internal" and not isinstance(exc, MajordomusError):
            log.error("execution_id=%s failed", execution_id, exc_info=exc)
        result = await ctx.finish("execution.failed", _failed(error, execution_id))
        return result.state

    # -- stopping ---------------------------------------------------------------------

    async def cancel_all(self, by: str) -> None:
        """Ask every running execution to stop (a worker told to stop, past its grace)."""
        for execution_id in list(self.running):
            await self.store.append(execution_id, [("execution.cancelling", encode({"by": by}))])
            self._on_cancel(execution_id, by)


def _failed(error: MajordomusError, execution_id: str) -> bytes:
    return b'{"error":' + encode(error.for_execution(execution_id)) + b"}"


async def sweep_lost(engine: Engine) -> int:
    """Fail the running executions of workers whose lease ran out; answers how many."""
    store = engine.store
    ids = await store.running_ids()
    if not ids:
        return 0
    workers = await store.owners(ids)
    alive: dict[str, bool] = {}
    for worker_id in {w.decode() for w in workers if w}:
        alive[worker_id] = await store.holds_lease(worker_id)
    failed = 0
    for execution_id, owner in zip(ids, workers, strict=True):
        if owner is not None and alive.get(owner.decode(), False):
            continue
        result = await store.append(execution_id, [("execution.failed", _failed(WORKER_LOST, execution_id))])
        if result.complete:
            failed += 1
            log.warning("execution_id=%s failed: its worker %s stopped", execution_id, owner)
    return failed
