"""Workers in the test's own process: the real worker, started, stopped and killed.

`InProcessWorker` runs `majordomus.workers` (the arq worker, its runtime, its ticker and
its sweeper) as tasks of the test's event loop, on a client of its own, as `majordomus
dev` runs its worker. `stop()` is a clean stop: it takes no more work, cancels what runs
(`by: "server"`), and removes its lease and presence. `kill()` is a SIGKILL: its client is
cut off first, so nothing more it does reaches Redis (no last event, no lease removed, the
sweeper lock left held), the server drops its connections (a take blocked there
included), and every task it made is cancelled. Its lease then runs out on its own.

Which tasks a worker made is known from the loop's task factory (`TaskLedger`): a task
created while one of its tasks runs is its, as a process's threads are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from majordomus.config import Settings
from majordomus.loops import within
from majordomus.registry import Registry
from majordomus.store.testing import Severance, drop_connections
from majordomus.workers.runtime import WorkerRuntime
from majordomus.workers.worker import build_worker

START_SECONDS = 10.0
"""How long a worker has to run its start-up (subscribe, first beat) before it is an error."""

STOP_SECONDS = 5.0
"""How long a stopping or killed worker's tasks have to end once cancelled."""

_OWNER: contextvars.ContextVar[InProcessWorker | None] = contextvars.ContextVar(
    "majordomus_testing_worker", default=None
)


class TaskLedger:
    """The event loop's task factory while an environment is open: a task created in a
    worker's context (a task of its, or a thread it started) is recorded as that worker's.
    One factory per loop, whatever the environments open on it; the loop's own comes back
    when the last one closes."""

    _installed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, Any]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        count, previous = self._installed.get(loop, (0, None))
        if count == 0:
            previous = loop.get_task_factory()
            loop.set_task_factory(_recording(previous))  # type: ignore[arg-type]
        self._installed[loop] = (count + 1, previous)

    def uninstall(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or loop not in self._installed:
            return
        count, previous = self._installed[loop]
        if count > 1:
            self._installed[loop] = (count - 1, previous)
            return
        del self._installed[loop]
        if not loop.is_closed():
            loop.set_task_factory(previous)


def _recording(previous: Callable[..., asyncio.Future[Any]] | None) -> Callable[..., Any]:
    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Future[Any]:
        task = previous(loop, coro, **kwargs) if previous else asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        owner = context.get(_OWNER) if context is not None else _OWNER.get()
        if owner is not None:
            owner.tasks.add(task)
        return task

    return factory


class InProcessWorker:
    """One worker of an environment, in its process."""

    def __init__(
        self,
        number: int,
        client: Any,
        severance: Severance,
        settings: Settings,
        registry: Registry,
    ) -> None:
        self.number = number
        self.name = client.connection_pool.connection_kwargs.get("client_name", "")
        """The name of its connections (`CLIENT LIST`)."""
        self.client = client
        self.severance = severance
        self.settings = settings
        self.worker = build_worker(settings, redis=client, registry=registry, handle_signals=False)
        self.tasks: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()
        """Every task it made (`TaskLedger`)."""
        self.killed = False
        self.stopped = False
        self._main: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "killed" if self.killed else "stopped" if self.stopped else "running"
        return f"<InProcessWorker {self.number} {self.id or '(starting)'} {state}>"

    @property
    def runtime(self) -> WorkerRuntime | None:
        """Its runtime (leases, signals, running executions), once it has started."""
        return self.worker.runtime  # type: ignore[no-any-return]

    @property
    def id(self) -> str | None:
        runtime = self.runtime
        return runtime.worker_id if runtime is not None else None

    @property
    def alive(self) -> bool:
        return self.runtime is not None and not (self.killed or self.stopped)

    @property
    def has_room(self) -> bool:
        """Whether it would take more work now."""
        w = self.worker
        return self.alive and w.allow_pick_jobs and w.job_counter < w.max_jobs

    async def start(self) -> None:
        """Run it, and return once its start-up is done (it takes work from now on)."""
        context = contextvars.copy_context()
        context.run(_OWNER.set, self)
        self._main = main = asyncio.get_running_loop().create_task(
            self.worker.async_run(), name=f"majordomus-testing-worker-{self.number}", context=context
        )
        self.tasks.add(main)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_SECONDS
        while self.runtime is None and not main.done():
            if loop.time() > deadline:
                await self.reap()
                raise RuntimeError(f"worker {self.number} did not start in {START_SECONDS:.0f} s")
            await asyncio.sleep(0.005)
        if main.done():
            main.result()  # its start-up's failure, raised here
            raise RuntimeError(f"worker {self.number} ended as it started")

    async def stop(self, server: Any) -> None:
        """Stop it cleanly: no more work, what runs cancelled (`by: "server"`), its lease
        and presence removed; then the server drops its connections (`server`, a client of
        the environment's own), a take still blocked there included."""
        if self.killed or self.stopped:
            return
        self.stopped = True
        worker, runtime = self.worker, self.runtime
        worker.allow_pick_jobs = False
        if runtime is not None:
            runtime.accepting = False
            with contextlib.suppress(Exception):
                await runtime.store.stop_blocking(runtime.worker_id)
            if runtime.running:
                with contextlib.suppress(Exception):
                    await runtime.cancel_all(by="server")
                await within(self.settings.cancel_grace + 1, worker.all_done())
        for task in (self._main, *worker.tasks.values()):
            if task is not None:
                task.cancel()
        await within(STOP_SECONDS, self._ended([self._main, *worker.tasks.values()]))
        if runtime is not None:
            with contextlib.suppress(Exception):
                await runtime.stop()
        await self.reap()
        with contextlib.suppress(Exception):
            await drop_connections(server, self.name)
        await self._close()

    async def kill(self, server: Any) -> None:
        """Kill it as SIGKILL would: nothing more it does reaches Redis (`server`, a client
        of the environment's own, has the server drop its connections), and every task
        it made is cancelled. Its executions stay `running` until its lease runs out."""
        if self.killed or self.stopped:
            return
        self.killed = True
        self.severance.cut = True
        for task in list(self.tasks):  # all at once, before any of them runs again
            task.cancel()
        with contextlib.suppress(Exception):
            await drop_connections(server, self.name)
        await self.reap()
        await self._close()

    async def reap(self) -> None:
        """Cancel every task it made that still runs (those made meanwhile too), and wait
        for them."""
        for _ in range(3):
            pending = [t for t in list(self.tasks) if not t.done()]
            if not pending:
                return
            for task in pending:
                task.cancel()
            await within(STOP_SECONDS, self._ended(pending))

    @staticmethod
    async def _ended(tasks: list[Any]) -> None:
        await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose(close_connection_pool=True)
