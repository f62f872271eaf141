"""Where a plain `def` handler runs: a pool of daemon threads, never joined.

asyncio's default executor (`asyncio.to_thread`) joins its threads when the loop closes
and again when the interpreter exits, so a handler stuck in a thread (a long sleep, a hung
call) held a stopping worker until it returned: two `def` handlers sleeping 40 s kept a
worker told to stop at 0 s alive until 39 s, past compose's stop grace. A thread cannot be
stopped from outside; these threads are daemons instead. A stopping worker ends their
executions (cancelled past its grace, or timed out) and exits, and a thread still running
ends with the process.

The pool grows to as many threads as handlers run at once (a stuck one is simply not idle
again) and keeps them: a thread is started only when none is idle, so a worker running
`def` handlers one after another reuses one thread, as the default executor did. This
module does not stop a handler, nor bound how many run: the worker's `max_jobs` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

HandlerCall = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...], contextvars.Context]


class HandlerThreads:
    """Daemon threads taking jobs from one queue; a new one only when none is idle."""

    def __init__(self, name: str = "majordomus-handler") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[HandlerCall] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self.started = 0
        """Threads started so far (each lives as long as the process)."""

    def submit(self, job: HandlerCall) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self.started += 1
                threading.Thread(
                    target=self._work, name=f"{self.name}-{self.started}", daemon=True
                ).start()
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            loop, future, fn, args, context = self._jobs.get()
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # noqa: BLE001  handed to the awaiting task
                error = exc
            # Idle before the answer is handed over: a job its awaiting task submits next
            # finds this thread rather than starting another.
            with self._lock:
                self._idle += 1
            _deliver(loop, future, result, error)
            del loop, future, fn, args, context, result, error  # nothing outlives its job


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, result, exc)
    except RuntimeError:  # the loop is closed: nobody waits for this answer any more
        pass


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # its task was cancelled (stopped past its grace, or timed out)
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


THREADS = HandlerThreads()
"""The process's pool."""


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in one of the pool's daemon threads, with this task's context, awaited:
    cancelling the await leaves the thread to finish (or die with the process) unjoined."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    THREADS.submit((loop, future, fn, args, contextvars.copy_context()))
    return await future
