"""The child process's side: import one capability's handler, then run its executions one
at a time, each with a `ChildContext` whose reports go to the worker.

Three threads: the main one runs an event loop with the handler (a plain `def` one in a
daemon thread of its own, `majordomus.handler_threads`), one reads the worker's messages,
and a `def` handler's thread reports too (its sends share one lock). The child ends when
told to (`Stop`), and at once, whatever it is running, when its worker is gone (its end of
the pipe closes): a worker killed outright leaves no child behind.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Generator
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from majordomus.config import settings
from majordomus.context import Context, ExecutionCancelled, held, sleep_unless
from majordomus.errors import MajordomusError
from majordomus.handler_threads import in_thread
from majordomus.logs import configure_from
from majordomus.model import LogStream, Severity

from . import wire


def resident_bytes() -> int:
    """This process's resident memory now (Linux's `/proc`), else its peak, else 0."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


def resolve(cap_id: str, module: str, qualname: str) -> Any:
    """The capability `cap_id` as its module declares it: the process registry's record
    once the module is imported, else what `module.qualname` names (a `Declared`)."""
    from majordomus.registry import REGISTRY

    mod = importlib.import_module(module)
    cap = REGISTRY.get(cap_id)
    if cap is not None:
        return cap
    found: Any = mod
    for part in qualname.split("."):
        found = getattr(found, part)
    cap = getattr(found, "capability", None)
    if cap is None or getattr(cap, "id", None) != cap_id:
        raise LookupError(f"{module}.{qualname} is not the capability {cap_id!r}")
    return cap


class _Reported:
    """What a child's report answers: awaiting it waits while the worker holds the handler."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ChildContext) -> None:
        self._ctx = ctx

    def __await__(self) -> Generator[Any, None, None]:
        if self._ctx.over_bound():
            yield from self._ctx.room().__await__()


class ChildContext(Context):
    """The context a handler gets in a child process: the same calls as in the worker, each
    report sent to the worker, which masks it and adds it to the execution's history."""

    observed = True

    def __init__(self, link: Link, execution_id: str) -> None:
        super().__init__(None, actor="internal")
        self.execution_id = execution_id
        self._link = link
        self._reported = _Reported(self)
        self._cancel_flag = False
        self._cancel = asyncio.Event()
        self.cancelled_by: str | None = None

    def _send(self, kind: str, *args: Any) -> _Reported:
        self._link.report(wire.Report(kind, list(args)))
        return self._reported

    def step(self, name: str, title: str | None = None) -> Any:
        return self._send("step", name, title)

    def step_done(self, name: str, ok: bool = True, detail: str | None = None) -> Any:
        return self._send("step_done", name, ok, detail)

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> Any:
        return self._send("progress", int(current), total, message)

    def log(self, message: str, stream: LogStream = "handler") -> Any:
        return self._send("log", str(message), stream)

    def diagnostic(
        self,
        severity: Severity,
        code: str,
        summary: str,
        detail: str | None = None,
        suggestion: str | None = None,
    ) -> Any:
        return self._send("diagnostic", severity, str(code), str(summary), detail, suggestion)

    def over_bound(self) -> bool:
        return self._link.over_window()

    async def room(self) -> None:
        while self.over_bound():
            await self._link.room_changed()

    def request_cancel(self, by: str) -> None:
        """Asked to stop: its flag at once (from the reader thread, so a `def` handler sees
        it even while the loop is busy), then its waits woken on the loop."""
        if self.cancelled_by is None:
            self.cancelled_by = by
        self._cancel_flag = True
        self._link.loop.call_soon_threadsafe(self._cancel.set)

    def cancelled(self) -> bool:
        return self._cancel_flag

    async def sleep(self, seconds: float) -> None:
        await sleep_unless(self._cancel, seconds)


class Link:
    """The child's end of its pipe: sends from any thread, one reader thread."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.loop = loop
        self.lock = threading.Lock()
        self.window = threading.Condition(threading.Lock())
        """Guards `sent` and `acked`; a `def` handler's thread waits on it."""
        self.sent = 0
        """Reports of the running execution sent so far."""
        self.acked = 0
        """... and acknowledged by the worker (`wire.Ack`)."""
        self._room_waiters: list[asyncio.Future[None]] = []
        self.inbox: asyncio.Queue[tuple[ChildContext, bytes] | None] = asyncio.Queue()
        self.ctx: ChildContext | None = None

    def send(self, message: Any) -> None:
        data = wire.encode(message)
        try:
            with self.lock:
                self.conn.send_bytes(data)
        except OSError:  # the worker is gone (or closed the pipe), as the reader finds too
            os._exit(0)

    def over_window(self) -> bool:
        with self.window:
            return self.sent - self.acked >= wire.WINDOW

    def report(self, message: wire.Report) -> None:
        with self.window:
            if threading.current_thread() is not threading.main_thread():
                # A plain `def` handler's thread waits here while its reports are unacknowledged.
                while self.sent - self.acked >= wire.WINDOW:
                    self.window.wait()
            self.sent += 1
        self.send(message)

    async def room_changed(self) -> None:
        waiter = self.loop.create_future()
        self._room_waiters.append(waiter)
        await waiter

    def _room_set(self) -> None:
        waiters, self._room_waiters = self._room_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def read(self) -> None:
        """The reader thread: the worker's messages, until its end closes (then exit)."""
        try:
            while True:
                message = wire.to_child.decode(self.conn.recv_bytes())
                if isinstance(message, wire.Cancel):
                    if self.ctx is not None:
                        self.ctx.request_cancel(message.by)
                elif isinstance(message, wire.Ack):
                    with self.window:
                        self.acked = max(self.acked, message.applied)
                        self.window.notify_all()
                    self.loop.call_soon_threadsafe(self._room_set)
                elif isinstance(message, wire.Run):
                    # Its context is made here, so a cancel read next finds it.
                    with self.window:
                        self.sent = self.acked = 0
                        self.window.notify_all()
                    ctx = self.ctx = ChildContext(self, message.execution_id)
                    self.loop.call_soon_threadsafe(self.inbox.put_nowait, (ctx, message.input))
                else:  # Stop
                    self.loop.call_soon_threadsafe(self.inbox.put_nowait, None)
        except (EOFError, OSError):
            pass
        os._exit(0)  # the worker is gone (or closed the pipe): nothing is left to run for


def _raised(exc: BaseException) -> wire.Raised:
    text = str(exc)
    shown = "".join(traceback.format_exception(exc))
    rss = resident_bytes()
    if isinstance(exc, (ExecutionCancelled, asyncio.CancelledError)):
        return wire.Raised(type(exc).__name__, text, shown, rss, cancelled=True)
    if isinstance(exc, MajordomusError):
        return wire.Raised(
            type(exc).__name__, text, shown, rss,
            code=exc.code, message=exc.message, suggestion=exc.suggestion,
        )
    pickled: bytes | None = None
    try:
        dumped = pickle.dumps(exc)
        pickle.loads(dumped)  # noqa: S301  one that does not load back is shown by name
        pickled = dumped
    except Exception:  # noqa: BLE001, S110  shown by its type's name and message instead
        pass
    return wire.Raised(type(exc).__name__, text, shown, rss, pickled=pickled)


async def _serve(conn: Connection, cap_id: str, module: str, qualname: str) -> None:
    link = Link(conn, asyncio.get_running_loop())
    threading.Thread(target=link.read, name="majordomus-child-reader", daemon=True).start()
    try:
        cap = resolve(cap_id, module, qualname)
    except BaseException as exc:  # noqa: BLE001  said to the worker, which fails the run
        link.send(wire.Broken(f"{type(exc).__name__}: {exc}"))
        return
    handler, is_async = cap.handler, inspect.iscoroutinefunction(cap.handler)
    decoder = msgspec.json.Decoder(cap.input)
    link.send(wire.Ready(os.getpid()))
    while True:
        job = await link.inbox.get()
        if job is None:
            return
        ctx, raw = job
        try:
            value = decoder.decode(raw)
            if is_async:
                output = await held(handler(ctx, value), ctx)
            else:
                output = await in_thread(handler, ctx, value)
            answer: Any = wire.Done(msgspec.json.encode(output), resident_bytes())
        except BaseException as exc:  # noqa: BLE001  every way out is told to the worker
            answer = _raised(exc)
        link.send(answer)


def main(conn: Connection, cap_id: str, module: str, qualname: str) -> None:
    """A child's life (the `multiprocessing.Process` target)."""
    # Ctrl-C in a terminal reaches the whole process group: the worker decides when its
    # executions stop, not the key press.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # What the handler logs (`logging`, a library it calls) is written as its worker's lines
    # are: a child, spawned or forked from the fork server, has no logging of its own.
    configure_from(settings())
    asyncio.run(_serve(conn, cap_id, module, qualname))
