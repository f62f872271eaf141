"""The worker's side: a pool of child processes per capability, and running one execution
in one of them (`ChildPool.run`).

A child runs one execution at a time; the pool keeps the idle ones warm (one is started
with the worker) and starts another when every one is busy, so a capability runs as many
executions at once in children as the worker's `max_jobs` (and its own `max_concurrency`)
let it. Each child's messages are read by a daemon thread of the worker and handed to the
event loop, where its reports are applied to the execution's context.

- A cancel (or a timeout, or the worker's stop) is sent to the child, whose context says
  `cancelled()`; a handler still running when the worker stops it past its grace has its
  child killed (SIGKILL), so nothing a handler does holds a stopping worker.
- A child that dies while it runs (a segfault, the kernel's OOM killer, `os._exit`) fails
  only that execution, `unavailable` (`ChildDied`), saying how it died; the pool starts
  another.
- A child is retired (told to exit, killed if it does not) after
  `MAJORDOMUS_CHILD_MAX_EXECUTIONS` executions or once its resident memory passes
  `MAJORDOMUS_CHILD_MAX_MEMORY_MB`, and replaced; one idle for `IDLE_SECONDS` is retired
  too, unless it is its capability's last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import msgspec

from majordomus.config import Settings
from majordomus.context import ExecutionCancelled
from majordomus.errors import MajordomusError
from majordomus.metrics import METRICS

from . import child as child_side
from . import wire

if TYPE_CHECKING:
    from majordomus.context import ExecutionContext
    from majordomus.registry import Capability

log = logging.getLogger("majordomus.worker")

READY_SECONDS = 60.0
"""How long a new child may take to import its handler's module before it is given up."""
IDLE_SECONDS = 300.0
"""How long a child beyond a capability's one warm child may stay idle before it is retired:
a burst grows a pool to as many children as ran at once, and a quiet hour shrinks it back."""
TRIM_EVERY_SECONDS = 30.0
"""How often a worker looks for children idle past `IDLE_SECONDS`."""
RETIRE_SECONDS = 5.0
"""How long a retired or stopping idle child has to exit before it is killed."""


class ChildDied(MajordomusError):
    """The child process running an execution died under it."""

    def __init__(self, cap_id: str, how: str, execution_id: str) -> None:
        super().__init__(
            "unavailable",
            f"the child process running {cap_id} died: {how}",
            "see the worker's log for this execution id; a child killed by SIGKILL that its "
            "worker did not kill was most likely out of memory (the kernel's OOM killer)",
            execution_id,
        )
        self.how = how


class ChildUnavailable(MajordomusError):
    """No child could be started for the capability (its module does not import there)."""

    def __init__(self, cap_id: str, reason: str, execution_id: str) -> None:
        super().__init__(
            "unavailable",
            f"no child process could run {cap_id}: {reason}",
            "a capability that runs in a process must be importable from its module (not "
            "declared in __main__ or inside a function); see the worker's log",
            execution_id,
        )


class ChildException(Exception):
    """An exception a handler raised in its child that could not be carried over as
    itself (it does not pickle): its type's name and its message."""

    def __init__(self, type_name: str, text: str) -> None:
        super().__init__(text)
        self.type_name = type_name


def how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "its pipe closed while it still runs"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with status {exitcode}"


def rebuilt(answer: wire.Raised, execution_id: str) -> BaseException:
    """What a handler raised in its child, raised again in the worker."""
    if answer.cancelled:
        exc: BaseException = ExecutionCancelled()
    elif answer.code is not None:
        exc = MajordomusError(
            answer.code,  # type: ignore[arg-type]
            answer.message or answer.text,
            answer.suggestion,
            execution_id,
        )
    else:
        exc = ChildException(answer.type_name, answer.text)
        if answer.pickled is not None:
            with contextlib.suppress(Exception):
                exc = pickle.loads(answer.pickled)  # noqa: S301  our own child's answer
    if isinstance(exc, Exception):
        exc.add_note(f"raised in the child process:\n{answer.traceback.rstrip()}")
    return exc


class Child:
    """One child process and the worker's end of its pipe."""

    def __init__(self, pool: ChildPool, process: multiprocessing.process.BaseProcess, conn: Connection) -> None:
        self.pool = pool
        self.process = process
        self.conn = conn
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[wire.Ready | wire.Broken | None] = self.loop.create_future()
        self.answer: asyncio.Future[wire.Done | wire.Raised] | None = None
        self.ctx: ExecutionContext | None = None
        self.runs = 0
        self.rss = 0
        self.dead = False
        self.killed = False
        """Whether the worker killed it (a stop past its grace), not something else."""
        self.retired = False
        self.idle_since = 0.0
        """When it last went idle (`time.monotonic()`)."""
        self.exitcode: int | None = None
        """How it ended, once its reader saw its pipe close and reaped it."""
        self._holding: asyncio.Task[None] | None = None
        """Waiting for room in the execution's buffer before acknowledging its reports."""
        self.applied = 0
        """Reports of the running execution applied to its context..."""
        self.acked = 0
        """... and acknowledged to the child (`wire.Ack`)."""
        self.reader = threading.Thread(
            target=self._read, name=f"majordomus-child-{process.pid}", daemon=True
        )
        self.reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, message: Any) -> None:
        if self.dead:
            return
        try:
            self.conn.send_bytes(wire.encode(message))
        except OSError:  # it died: its reader says so
            pass

    def kill(self) -> None:
        if not self.dead:
            self.killed = True
        with contextlib.suppress(Exception):
            self.process.kill()

    def _read(self) -> None:
        """The reader thread: each message to the loop, then the end of the pipe."""
        try:
            while True:
                data = self.conn.recv_bytes()
                self.loop.call_soon_threadsafe(self._on_message, data)
        except (EOFError, OSError, RuntimeError):  # its end, or the loop closed (the worker's)
            pass
        # Reaped here and only here (one thread waiting on a child): its exit code says how
        # it ended.
        with contextlib.suppress(Exception):
            self.process.join(RETIRE_SECONDS)
            self.exitcode = self.process.exitcode
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody asks any more
            self.loop.call_soon_threadsafe(self._on_end)

    def _on_message(self, data: bytes) -> None:
        message = wire.from_child.decode(data)
        if isinstance(message, wire.Report):
            ctx = self.ctx
            if ctx is None:
                return
            getattr(ctx, message.kind)(*message.args)
            self.applied += 1
            if self._holding is None and self.applied - self.acked >= wire.ACK_EVERY:
                if ctx.over_bound():  # acknowledged once there is room
                    self._holding = self.loop.create_task(self._room(ctx))
                else:
                    self._ack()
        elif isinstance(message, (wire.Done, wire.Raised)):
            self.rss = message.rss
            if self.answer is not None and not self.answer.done():
                self.answer.set_result(message)
        elif not self.ready.done():
            self.ready.set_result(message)

    def _ack(self) -> None:
        self.acked = self.applied
        self.send(wire.Ack(self.applied))

    async def _room(self, ctx: ExecutionContext) -> None:
        try:
            await ctx.room()
        finally:
            self._holding = None
        self._ack()

    def _on_end(self) -> None:
        self.dead = True
        if not self.ready.done():
            self.ready.set_result(None)
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(_Ended(how_it_ended(self.exitcode)))
        self.pool._gone(self)

    def end_run(self) -> None:
        self.ctx, self.answer = None, None
        if self._holding is not None:
            self._holding.cancel()
            self._holding = None


class _Ended(Exception):
    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def start_method(settings: Settings) -> str:
    """`forkserver` where the platform has it (else `spawn`), or `spawn` when asked."""
    if settings.child_start == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
        return "forkserver"
    return "spawn"


class ChildPool:
    """The warm children of one capability."""

    def __init__(self, cap: Capability, settings: Settings) -> None:
        self.cap = cap
        self.settings = settings
        # typeshed says BaseContext, which has no Process; a forkserver or spawn one has.
        self.mp: Any = multiprocessing.get_context(start_method(settings))
        self.idle: list[Child] = []
        self.busy: set[Child] = set()
        self.started = 0
        """Children started so far."""
        self.recycled = 0
        """Children retired after their count or their memory."""
        self._warming: asyncio.Task[None] | None = None
        self._closed = False

    # -- children ---------------------------------------------------------------------

    async def _new_child(self, execution_id: str = "") -> Child:
        handler = self.cap.handler
        parent_end, child_end = self.mp.Pipe(duplex=True)
        process = self.mp.Process(
            target=child_side.main,
            args=(child_end, self.cap.id, handler.__module__, handler.__qualname__),
            name=f"majordomus-child {self.cap.id}",
            daemon=True,
        )
        # Starting one writes to the fork server (or execs an interpreter): off the loop.
        try:
            await asyncio.to_thread(process.start)
        except OSError as exc:  # out of processes, memory or file descriptors
            parent_end.close()
            child_end.close()
            log.error("capability %s: a child process could not be started: %s", self.cap.id, exc)
            raise ChildUnavailable(self.cap.id, f"a child could not be started: {exc}", execution_id) from None
        child_end.close()  # the child's now: its death closes the pipe for the reader
        self.started += 1
        METRICS.children_started.add((self.cap.id,), 1.0)
        child = Child(self, process, parent_end)
        try:
            async with asyncio.timeout(READY_SECONDS):
                ready = await asyncio.shield(child.ready)
        except TimeoutError:
            child.kill()
            raise ChildUnavailable(
                self.cap.id, f"its child was not ready in {READY_SECONDS:g} s", execution_id
            ) from None
        except BaseException:  # stopped while it starts: it goes, it is nobody's
            child.kill()
            raise
        if isinstance(ready, wire.Ready):
            return child
        child.kill()
        reason = ready.reason if isinstance(ready, wire.Broken) else how_it_ended(child.exitcode)
        log.error("capability %s: its child process cannot run it: %s", self.cap.id, reason)
        raise ChildUnavailable(self.cap.id, reason, execution_id)

    def warm(self) -> None:
        """Start one child ahead of the first execution (in the background)."""
        if self._warming is None and not self.idle and not self._closed:
            self._warming = asyncio.get_running_loop().create_task(self._warm())

    async def _warm(self) -> None:
        try:
            child = await self._new_child()
        except Exception as exc:  # noqa: BLE001  the first execution tries again, and says it
            log.warning("capability %s: no warm child (%s)", self.cap.id, exc)
            return
        finally:
            self._warming = None
        if self._closed:
            child.send(wire.Stop())
            return
        self.idle.append(child)

    async def _acquire(self, execution_id: str) -> Child:
        while self.idle:
            child = self.idle.pop()
            if not child.dead:
                return child
        if self._warming is not None:  # the warm child is on its way: it is this one's
            with contextlib.suppress(Exception):
                await asyncio.shield(self._warming)
            if self.idle:
                return self.idle.pop()
        return await self._new_child(execution_id)

    def _release(self, child: Child) -> None:
        if child.dead or child.killed or self._closed:
            return
        limit_mb = self.settings.child_max_memory_mb
        if (
            self.settings.child_max_executions and child.runs >= self.settings.child_max_executions
        ) or (limit_mb and child.rss > limit_mb * 1024 * 1024):
            self.recycled += 1
            self._retire(child, f"after {child.runs} executions ({child.rss / 2**20:.0f} MiB resident)")
            self.warm()
            return
        child.idle_since = time.monotonic()
        self.idle.append(child)

    def trim(self) -> None:
        """Retire the children idle for longer than `IDLE_SECONDS`, but the warm one."""
        if len(self.idle) <= 1:
            return
        cutoff = time.monotonic() - IDLE_SECONDS
        newest = max(self.idle, key=lambda c: c.idle_since)
        for child in [c for c in self.idle if c is not newest and c.idle_since < cutoff]:
            self.idle.remove(child)
            self._retire(child, f"idle for {IDLE_SECONDS:g} s")

    def _retire(self, child: Child, why: str) -> None:
        child.retired = True
        log.info("capability %s: retiring its child %s %s", self.cap.id, child.pid, why)
        child.send(wire.Stop())
        asyncio.get_running_loop().create_task(_reap(child))

    def _gone(self, child: Child) -> None:
        with contextlib.suppress(ValueError):
            self.idle.remove(child)
        how = (
            "killed" if child.killed else "recycled" if child.retired
            else "stopped" if self._closed else "died"
        )  # fmt: skip
        METRICS.children_ended.add((self.cap.id, how), 1.0)
        if how == "died":
            log.warning(
                "capability %s: its child %s ended: %s",
                self.cap.id, child.pid, how_it_ended(child.exitcode),
            )

    # -- running ----------------------------------------------------------------------

    async def run(self, ctx: ExecutionContext, raw_input: bytes) -> msgspec.Raw:
        """Run one execution (its validated input as JSON) in a child; its output as the
        JSON the handler answered, or what it raised, raised here."""
        execution_id = ctx.execution_id
        child = await self._acquire(execution_id)
        self.busy.add(child)
        answer = child.answer = child.loop.create_future()
        child.ctx = ctx
        child.applied = child.acked = 0
        child.runs += 1
        child.send(wire.Run(execution_id, raw_input))
        forward = child.loop.create_task(_forward_cancel(child, ctx))
        try:
            ended = await answer
        except _Ended as died:
            raise ChildDied(self.cap.id, died.how, execution_id) from None
        except asyncio.CancelledError:
            # Stopped past its grace (or the worker is torn down): its child goes with it.
            child.kill()
            raise
        finally:
            forward.cancel()
            child.end_run()
            self.busy.discard(child)
            self._release(child)
        if isinstance(ended, wire.Done):
            return msgspec.Raw(ended.output)
        raise rebuilt(ended, execution_id)

    async def close(self) -> None:
        """Stop every child: idle ones are told to exit, busy ones killed; all reaped."""
        self._closed = True
        if self._warming is not None:
            self._warming.cancel()
        children = list(self.idle) + list(self.busy)
        self.idle.clear()
        for child in children:
            if child in self.busy:
                child.kill()
            else:
                child.send(wire.Stop())
        await asyncio.gather(*(_reap(child) for child in children))


async def _forward_cancel(child: Child, ctx: ExecutionContext) -> None:
    await ctx.wait_cancelled()
    child.send(wire.Cancel(ctx.cancelled_by or "user"))


async def _reap(child: Child) -> None:
    """Wait for a child told to exit; kill it past `RETIRE_SECONDS`."""
    await asyncio.to_thread(child.reader.join, RETIRE_SECONDS)
    if child.reader.is_alive():
        child.kill()
        await asyncio.to_thread(child.reader.join, RETIRE_SECONDS * 2)
    with contextlib.suppress(Exception):
        child.conn.close()


class Children:
    """A worker's pools, one per capability that runs in a process, made on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pools: dict[str, ChildPool] = {}

    def pool(self, cap: Capability) -> ChildPool:
        pool = self.pools.get(cap.id)
        if pool is None:
            pool = self.pools[cap.id] = ChildPool(cap, self.settings)
        return pool

    def warm(self, caps: list[Capability]) -> None:
        modules = sorted({cap.handler.__module__ for cap in caps} - {"__main__"})
        if caps and start_method(self.settings) == "forkserver":
            # Children fork from a server that already imported majordomus and the handlers'
            # modules (when it is not already running: it is one per process).
            with contextlib.suppress(Exception):
                multiprocessing.get_context("forkserver").set_forkserver_preload(
                    ["majordomus.children.child", *modules]
                )
        for cap in caps:
            self.pool(cap).warm()

    async def trim_forever(self) -> None:
        """Shrink the pools a burst grew, while the worker runs (`ChildPool.trim`)."""
        while True:
            await asyncio.sleep(TRIM_EVERY_SECONDS)
            for pool in list(self.pools.values()):
                pool.trim()

    async def close(self) -> None:
        await asyncio.gather(*(pool.close() for pool in self.pools.values()))
